package bus

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/internal/wait"
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

// feedReader reads a Feeds' source on its own goroutine, as ingest does.
type feedReader struct {
	feeds *Feeds
	mu    sync.Mutex
	got   []ingest.Msg
	done  chan struct{}
}

func readFeeds(feeds *Feeds) *feedReader {
	r := &feedReader{feeds: feeds, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		buf := make([]ingest.Msg, 0, 16)
		for more := true; more; {
			buf, more = feeds.Source().Next(buf[:0])
			r.mu.Lock()
			r.got = append(r.got, buf...)
			r.mu.Unlock()
		}
	}()
	return r
}

// await waits until n messages were delivered.
func (r *feedReader) await(t *testing.T, n int) {
	t.Helper()
	wait.For(t, 10*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.got) < n {
			return fmt.Errorf("%d of %d messages delivered", len(r.got), n)
		}
		return nil
	})
}

// stop stops the source and returns every message it delivered.
func (r *feedReader) stop() []ingest.Msg {
	r.feeds.Source().Stop()
	<-r.done
	return r.got
}

// Every message published before Stop is delivered, in order, then Next
// says the source is done.
func TestSubscribeDeliversAllThenStops(t *testing.T) {
	b := openTest(t, false)
	src, err := b.Subscribe("chat.>", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		b.Publish(fmt.Sprintf("chat.r.u%d", i), []byte(fmt.Sprint(i)))
	}
	wait.For(t, 10*time.Second, func() error { // the client has taken them in
		if got, _ := b.events.Load().Delivered(); got < n {
			return fmt.Errorf("the subscription has %d of %d messages", got, n)
		}
		return nil
	})
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

// A feed read from the start replays what the stream held, marks the
// last of it CaughtUp and what was handled before (up to ReplayThrough)
// Replay, and delivers what comes later as live.
func TestFeedReplayThenLive(t *testing.T) {
	b := openTest(t, true)
	ctx := context.Background()
	if err := b.EnsureStreams(ctx, StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour}, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := natsRequest(b.nc, fmt.Sprintf("chat.r.u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	last, err := b.LastSeq(ctx, "CHAT")
	if err != nil || last != 5 {
		t.Fatalf("last sequence %d, %v; want 5", last, err)
	}
	feeds := b.NewFeeds()
	feed, caughtUp, err := feeds.Start(ctx, FeedConfig{Stream: "CHAT", Filter: "chat.>", FromTime: time.Now().Add(-time.Minute), ReplayThrough: 3})
	if err != nil || caughtUp {
		t.Fatalf("Start: caught up %v, %v; want something to replay", caughtUp, err)
	}
	r := readFeeds(feeds)
	r.await(t, 5)
	natsRequest(b.nc, "chat.r.live")
	r.await(t, 6)
	feed.Stop()
	got := r.stop()
	if len(got) != 6 {
		t.Fatalf("got %d messages, want 6", len(got))
	}
	for i, m := range got {
		wantReplay, wantCaughtUp := i < 3, i == 4
		if m.Replay != wantReplay || m.CaughtUp != wantCaughtUp || m.Received == 0 || m.Seq != uint64(i+1) {
			t.Errorf("message %d (%s): seq %d replay %v caughtUp %v received %d", i, m.Subject, m.Seq, m.Replay, m.CaughtUp, m.Received)
		}
	}
}

// A feed whose consumer reports an error and then delivers nothing (as
// an ordered consumer whose recreation waits on a lost NATS node) is
// given another consumer, from the message after its last: every message
// is delivered once, in order. Its troubled consumer here is one of a
// filter without messages, deleted on the server.
func TestFeedReplacesATroubledConsumer(t *testing.T) {
	defer func(d time.Duration) { feedCheck = d }(feedCheck)
	feedCheck = 50 * time.Millisecond
	b := openTest(t, true)
	ctx := context.Background()
	if err := b.EnsureStreams(ctx, StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour}, 0); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := b.js.Publish(ctx, "chat.r.u", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0, 3)
	feeds := b.NewFeeds()
	feed, _, err := feeds.Start(ctx, FeedConfig{Stream: "CHAT", Filter: "chat.>", FromSeq: 1, Subject: "chat.>"})
	if err != nil {
		t.Fatal(err)
	}
	r := readFeeds(feeds)
	r.await(t, 3)
	stalled, err := b.js.OrderedConsumer(ctx, "CHAT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"chat.none.none"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := feed.consume(stalled); err != nil {
		t.Fatal(err)
	}
	if err := b.js.DeleteConsumer(ctx, "CHAT", stalled.CachedInfo().Name); err != nil {
		t.Fatal(err)
	}
	// It hears so at once if it had a pull waiting, or else when its
	// heartbeats stop (10 s); then it recreates itself, with the same
	// filter, which has no messages.
	wait.For(t, 30*time.Second, func() error {
		if feed.gen.Load() < 3 {
			return fmt.Errorf("consumer generation %d: the troubled one (2) not replaced yet", feed.gen.Load())
		}
		return nil
	})
	publish(3, 6)
	r.await(t, 6)
	feed.Stop()
	got := r.stop()
	if len(got) != 6 {
		t.Errorf("%d messages delivered, want 6", len(got))
	}
	for i, m := range got {
		if string(m.Data) != fmt.Sprint(i) || m.Seq != uint64(i+1) {
			t.Errorf("message %d: seq %d, %q", i, m.Seq, m.Data)
		}
	}
	if gen := feed.gen.Load(); gen < 3 || b.ConsumersReplaced() == 0 {
		t.Errorf("consumer generation %d, %d replaced: the troubled one (2) was not replaced", gen, b.ConsumersReplaced())
	}
}

// Halt returns once the callbacks that were running when it was called
// are done, and those after it deliver nothing; a feed that never ran
// halts at once.
func TestFeedHalt(t *testing.T) {
	(&Feed{}).Halt()
	f := &Feed{idle: make(chan struct{})}
	if !f.enter() {
		t.Fatal("a callback before Halt was told to drop its message")
	}
	var left atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Halt()
		if !left.Load() {
			t.Error("Halt returned while a callback delivered")
		}
	}()
	wait.For(t, 10*time.Second, func() error {
		if f.calls.Load()&halted == 0 {
			return fmt.Errorf("not halted yet")
		}
		return nil
	})
	for range 2 { // after Halt, and counted out again
		if f.enter() {
			t.Fatal("a callback after Halt was told to deliver")
		}
	}
	left.Store(true)
	f.leave()
	<-done
	f.Halt() // again: at once
	if f.enter() {
		t.Fatal("a callback after Halt was told to deliver")
	}
}

// BenchmarkFeed is a feed replaying a stream into its Source as fast as
// one reader takes it: one op is one message delivered.
func BenchmarkFeed(b *testing.B) {
	bus := openBench(b, true)
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour}, 0); err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"room":"lobby","user":"alice","text":"hello"}`)
	for i := range b.N {
		if i%1000 == 0 { // within the client's window of unacknowledged messages
			<-bus.js.PublishAsyncComplete()
		}
		if _, err := bus.js.PublishAsync(fmt.Sprintf("chat.lobby.u%d", i%100), data); err != nil {
			b.Fatal(err)
		}
	}
	<-bus.js.PublishAsyncComplete()
	feeds := bus.NewFeeds()
	b.ReportAllocs()
	b.ResetTimer()
	feed, _, err := feeds.Start(ctx, FeedConfig{Stream: "CHAT", Filter: "chat.>", FromSeq: 1, Subject: "chat.>"})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]ingest.Msg, 0, 1024)
	for n := 0; n < b.N; n += len(buf) {
		buf, _ = feeds.Source().Next(buf[:0])
	}
	b.StopTimer()
	feed.Stop()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// natsRequest publishes to a stream and waits for its ack.
func natsRequest(nc *nats.Conn, subject string) (*nats.Msg, error) {
	return nc.Request(subject, []byte(`{}`), 5*time.Second)
}

// The embedded server cannot listen where something else does: Open says
// why, rather than waiting for it.
func TestOpenPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	b, err := Open(Options{Host: "127.0.0.1", Port: port, JetStream: true, DataDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		b.Close()
		t.Fatalf("Open on port %d, which is in use: no error", port)
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Open on a port in use: %v; want it to say the address is in use", err)
	}
}
