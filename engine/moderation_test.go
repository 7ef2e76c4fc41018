package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/moderation"
)

// A raid's worth of timeouts all expire in one sweep: every one is taken
// out of the bucket and told once in the audit trail, however many expire
// at once (each write has a deadline of its own).
func TestModerationSweepsARaid(t *testing.T) {
	const n = 3000
	url := natstest.Start(t).URL()
	b, err := bus.Open(bus.Options{URL: url, JetStream: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	m := NewModeration(func() time.Time { return time.UnixMilli(clock.Load()) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := m.Attach(t.Context(), b, true, 1); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		until := chat.Time(clock.Load() + 1000)
		if _, err := m.Put(t.Context(), moderation.Action{Kind: moderation.Timeout, User: fmt.Sprint("raider-", i), Until: &until}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(2000)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m.Sweep(ctx, clock.Load())
	if in, expired := m.Book.List(clock.Load()); len(in) != 0 || len(expired) != 0 {
		t.Errorf("the book after the sweep: %d in force, %d expired", len(in), len(expired))
	}
	kept := 0
	for _, e := range watchAll(t, m.Bucket()) {
		if !e.Deleted {
			kept++
		}
	}
	if kept != 0 {
		t.Errorf("%d expired timeouts still in the bucket", kept)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), bus.ModerationLogStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(bus.ModerationPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[bus.ModerationPrefix+"timeout"]; got != 2*n {
		t.Errorf("the audit trail holds %d timeout entries, want %d: each set and each expiry", got, 2*n)
	}
}

// watchAll is every key the bucket holds now.
func watchAll(t *testing.T, k *bus.Bucket) []*bus.Entry {
	t.Helper()
	w, err := k.WatchAll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []*bus.Entry
	for e := range w {
		if e == nil {
			return out
		}
		out = append(out, e)
	}
	return out
}
