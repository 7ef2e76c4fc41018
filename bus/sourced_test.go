package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/internal/wait"
)

// A chat stream with a Source has no subjects of its own and takes what
// the foreign stream gets, subject and headers kept, Nats-Stream-Source
// added; an existing stream that does not source it is refused, one that
// does is used.
func TestSourcedStream(t *testing.T) {
	b := openTest(t, true)
	ctx := context.Background()
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: "Foreign", Subjects: []string{"Foreign"}, Retention: jetstream.InterestPolicy}); err != nil {
		t.Fatal(err)
	}
	c := StreamConfig{Stream: "MINE", Subject: ">", MaxAge: time.Hour, Source: "Foreign"}
	if err := b.EnsureStreams(ctx, c, 0); err != nil {
		t.Fatal(err)
	}
	s, err := b.js.Stream(ctx, "MINE")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; len(cfg.Subjects) != 0 || len(cfg.Sources) != 1 || cfg.Sources[0].Name != "Foreign" || cfg.Sources[0].FilterSubject != "" {
		t.Fatalf("stream MINE: subjects %v, sources %+v", cfg.Subjects, cfg.Sources)
	}
	// The source is set up once the server has made its consumer; then
	// what the foreign stream gets is copied.
	wait.For(t, 10*time.Second, func() error {
		f, err := b.js.Stream(ctx, "Foreign")
		if err != nil {
			return err
		}
		if n := f.CachedInfo().State.Consumers; n != 1 {
			return fmt.Errorf("the foreign stream has %d consumers, want the source's", n)
		}
		return nil
	})
	msg := nats.NewMsg("Foreign")
	msg.Header.Set("X-Trace", "x")
	msg.Data = []byte("hello")
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		m, err := s.GetMsg(ctx, 1)
		if err != nil {
			return err
		}
		if m.Subject != "Foreign" || m.Header.Get("X-Trace") != "x" || m.Header.Get("Nats-Stream-Source") == "" || string(m.Data) != "hello" {
			return fmt.Errorf("copied as %s %v %q", m.Subject, m.Header, m.Data)
		}
		return nil
	})
	if err := b.EnsureStreams(ctx, c, 0); err != nil {
		t.Fatalf("the stream it made: %v", err)
	}
	if err := b.EnsureStreams(ctx, StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour}, 0); err != nil {
		t.Fatal(err)
	}
	c.Stream = "CHAT"
	if err := b.EnsureStreams(ctx, c, 0); !errors.Is(err, ErrNotSourced) {
		t.Fatalf("a stream of chatpulse's own events: %v, want ErrNotSourced", err)
	}
	if err := b.EnsureStreams(ctx, c, 8); err == nil {
		t.Fatal("a group on a sourced stream")
	}
}
