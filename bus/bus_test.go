package bus

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/ingest"
)

func openTest(t *testing.T, jetStream bool) *Bus {
	t.Helper()
	b, err := Open(Options{Host: "127.0.0.1", JetStream: jetStream, DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// drain reads src until it says it is done.
func drain(src *Source) []ingest.Msg {
	var all []ingest.Msg
	buf := make([]ingest.Msg, 0, 7)
	for more := true; more; {
		buf, more = src.Next(buf[:0])
		all = append(all, buf...)
	}
	return all
}

// Every message published before Stop is delivered, in order, then Next
// says the source is done.
func TestSubscribeDeliversAllThenStops(t *testing.T) {
	b := openTest(t, false)
	src, err := b.Subscribe("chat.>")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		b.Publish(fmt.Sprintf("chat.r.u%d", i), []byte(fmt.Sprint(i)))
	}
	b.nc.Flush()
	time.Sleep(50 * time.Millisecond) // let the client take them in
	src.Stop()
	got := drain(src)
	if len(got) != n {
		t.Fatalf("got %d messages, want %d", len(got), n)
	}
	for i, m := range got {
		if string(m.Data) != fmt.Sprint(i) || m.Subject != fmt.Sprintf("chat.r.u%d", i) || m.Replay {
			t.Fatalf("message %d = %+v", i, m)
		}
	}
}

// A stream read from the start replays what it held, marks the last of it
// CaughtUp, and delivers what comes later as live.
func TestStreamReplayThenLive(t *testing.T) {
	b := openTest(t, true)
	ctx := context.Background()
	cfg := StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour, From: time.Now().Add(-time.Minute)}
	// The first reader creates the stream; nothing to replay.
	src, replaying, err := b.Stream(ctx, cfg)
	if err != nil || replaying {
		t.Fatalf("first Stream: replaying %v, %v", replaying, err)
	}
	src.Stop()
	js := b.nc
	for i := range 5 {
		if _, err := natsRequest(js, fmt.Sprintf("chat.r.u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	src, replaying, err = b.Stream(ctx, cfg)
	if err != nil || !replaying {
		t.Fatalf("second Stream: replaying %v, %v", replaying, err)
	}
	var got []ingest.Msg
	buf := make([]ingest.Msg, 0, 16)
	read := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); len(got) < n && time.Now().Before(deadline); {
			buf, _ = src.Next(buf[:0])
			got = append(got, buf...)
		}
	}
	read(5)
	natsRequest(js, "chat.r.live")
	read(6)
	src.Stop()
	if len(got) != 6 {
		t.Fatalf("got %d messages, want 6", len(got))
	}
	for i, m := range got {
		wantReplay, wantCaughtUp := i < 5, i == 4
		if m.Replay != wantReplay || m.CaughtUp != wantCaughtUp || m.Received == 0 {
			t.Errorf("message %d (%s): replay %v caughtUp %v received %d", i, m.Subject, m.Replay, m.CaughtUp, m.Received)
		}
	}
}

// natsRequest publishes to a stream and waits for its ack.
func natsRequest(nc *nats.Conn, subject string) (*nats.Msg, error) {
	return nc.Request(subject, []byte(`{}`), 5*time.Second)
}
