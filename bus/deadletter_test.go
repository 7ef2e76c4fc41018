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
	"github.com/chatpulse/chatpulse/internal/wait"
)

// A dead letter keeps the payload and headers and says what was wrong;
// the publisher's NATS headers are kept under other names, whatever their
// case, so that NATS does not act on them.
func TestDeadLetter(t *testing.T) {
	b := openTest(t, false)
	sub, err := b.nc.SubscribeSync(DeadLetterPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	header := nats.Header{"X-Trace": {"7"}, "Nats-Msg-Id": {"m-1"}, "nats-expected-stream": {"CHAT"}, "Chatpulse-Error": {"forged"}}
	b.DeadLetter(&ingest.Msg{Subject: "chat.x", Data: []byte("not json"), Header: header},
		&ingest.Error{Reason: ingest.ReasonMalformed, Msg: "no JSON value in payload"})
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "chatpulse.deadletter.malformed" || string(m.Data) != "not json" ||
		m.Header.Get("X-Trace") != "7" || m.Header.Get(ErrorHeader) != "no JSON value in payload" || m.Header.Get(SubjectHeader) != "chat.x" ||
		m.Header.Get("Chatpulse-Original-Nats-Msg-Id") != "m-1" || m.Header.Get("Chatpulse-Original-nats-expected-stream") != "CHAT" ||
		m.Header.Get("Nats-Msg-Id") != "" || m.Header.Get("nats-expected-stream") != "" {
		t.Fatalf("dead letter = %s %q %v", m.Subject, m.Data, m.Header)
	}
	if len(header) != 4 || header.Get("Nats-Msg-Id") != "m-1" {
		t.Fatalf("the rejected message's headers changed: %v", header)
	}
}

// An event read from a stream and rejected twice (by the member that held
// its partition and by the one that took it over) is kept once.
func TestDeadLetterOnce(t *testing.T) {
	b := openTest(t, true)
	ctx := context.Background()
	if err := b.EnsureStreams(ctx, StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour}, 0); err != nil {
		t.Fatal(err)
	}
	e := &ingest.Error{Reason: ingest.ReasonMalformed, Msg: "no JSON value in payload"}
	for range 2 {
		b.DeadLetter(&ingest.Msg{Subject: "chat.x", Data: []byte("not json"), Seq: 42}, e)
	}
	b.DeadLetter(&ingest.Msg{Subject: "chat.x", Data: []byte("not json"), Seq: 43}, e)
	// The stream has answered all three (the duplicate too) once every
	// ack is in: it then holds whatever it will keep of them.
	acked := b.dead.js.PublishAsyncComplete()
	wait.For(t, 10*time.Second, func() error {
		select {
		case <-acked:
			return nil
		default:
			return fmt.Errorf("%d of 3 dead letters not acked yet", b.dead.js.PublishAsyncPending())
		}
	})
	s, err := b.js.Stream(ctx, DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 || b.DeadLetterFailed() != 0 {
		t.Fatalf("%d dead letters kept (failed %d), want 2", n, b.DeadLetterFailed())
	}
}

// BenchmarkDeadLetter is the cost of a dead letter kept in the dead-letter
// stream: ns/op and kept/s until the last one is known kept, ns/call the
// time ingest's goroutine spends in the calls:
//   - core: a plain publish, no ack (how dead letters went before: the
//     stream may refuse them and nobody knows);
//   - async: chatpulse's way, acks awaited asynchronously in a window;
//   - sync: waiting for each ack in turn.
func BenchmarkDeadLetter(b *testing.B) {
	for _, mode := range []string{"core", "async", "sync"} {
		b.Run(mode, func(b *testing.B) {
			bus := openBench(b, mode != "core")
			js := bus.js
			ctx := context.Background()
			if err := bus.EnsureStreams(ctx, StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour}, 0); err != nil {
				b.Fatal(err)
			}
			m := &ingest.Msg{Subject: "chat.x", Data: []byte(`{"room":"lobby","user":"alice","ts":"yesterday"}`),
				Header: nats.Header{"Nats-Msg-Id": {"m-1"}}}
			e := &ingest.Error{Reason: ingest.ReasonInvalid, Msg: `ts: "yesterday" is not an RFC 3339 time`}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				switch mode {
				case "sync":
					if _, err := js.PublishMsg(ctx, deadLetterMsg(m, e)); err != nil {
						b.Fatal(err)
					}
				default:
					bus.DeadLetter(m, e)
				}
			}
			calls := time.Since(start)
			bus.dead.flush()
			// Without acks, only the stream's count says when all are kept.
			kept := func() uint64 {
				info, err := js.Stream(ctx, DeadLetterStream)
				if err != nil {
					b.Fatal(err)
				}
				return info.CachedInfo().State.Msgs
			}
			err := wait.Until(10*time.Second, func() error {
				if n := kept(); n < uint64(b.N) {
					return fmt.Errorf("%d of %d kept", n, b.N)
				}
				return nil
			})
			b.StopTimer()
			if n := kept(); err != nil || n != uint64(b.N) || bus.DeadLetterFailed() != 0 {
				b.Fatalf("%d of %d kept, %d failed (%v)", n, b.N, bus.DeadLetterFailed(), err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "kept/s")
			b.ReportMetric(float64(calls.Nanoseconds())/float64(b.N), "ns/call")
		})
	}
}

func openBench(b *testing.B, acks bool) *Bus {
	bus, err := Open(Options{Host: "127.0.0.1", JetStream: true, DataDir: b.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(bus.Close)
	if !acks {
		bus.dead.js = nil
	}
	return bus
}
