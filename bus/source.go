package bus

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/ingest"
)

const (
	// coreBuffer is how many messages the core subscription may hold
	// before the client drops (and counts) what comes next.
	coreBuffer = 1 << 18
	// jsBuffer is how many messages the JetStream consumer may have
	// fetched and not yet handed over.
	jsBuffer = 4096
)

// A Source delivers chat events to ingest (it is an ingest.Source). Stop
// ends delivery; Next then returns what had arrived, and then false.
type Source struct {
	next    func(buf []ingest.Msg) ([]ingest.Msg, bool)
	stop    func()
	stopped chan struct{}
	pending atomic.Uint64
}

// Pending is how many messages the stream held past the last one Next
// took, as JetStream said when it delivered that one (Bus.Read only; 0
// before the first).
func (s *Source) Pending() uint64 { return s.pending.Load() }

// Next appends what has arrived to buf, up to cap(buf), waiting until
// something has or delivery has stopped.
func (s *Source) Next(buf []ingest.Msg) ([]ingest.Msg, bool) { return s.next(buf) }

// Stop stops delivery and returns once NATS delivers no more.
func (s *Source) Stop() {
	s.stop()
	close(s.stopped)
}

// newSource is a Source over the channel NATS delivers into, whatever its
// element type: conv turns one element into an ingest.Msg as Next takes it
// (false: none, skip it), so no goroutine stands between NATS and ingest.
func newSource[M any](ch <-chan M, conv func(M) (ingest.Msg, bool), stop func()) *Source {
	s := &Source{stop: stop, stopped: make(chan struct{})}
	take := func(buf []ingest.Msg, m M) []ingest.Msg {
		if in, ok := conv(m); ok {
			buf = append(buf, in)
		}
		return buf
	}
	s.next = func(buf []ingest.Msg) ([]ingest.Msg, bool) {
		select {
		case m := <-ch:
			buf = take(buf, m)
		case <-s.stopped:
		}
		for len(buf) < cap(buf) {
			select {
			case m := <-ch:
				buf = take(buf, m)
			default:
				select {
				case <-s.stopped:
					return buf, false // stopped, and nothing is left
				default:
					return buf, true
				}
			}
		}
		return buf, true
	}
	return s
}

// NewSource is a Source over a channel that others fill (a group member's
// feeds); stop stops them.
func NewSource(ch <-chan ingest.Msg, stop func()) *Source {
	return newSource(ch, func(m ingest.Msg) (ingest.Msg, bool) { return m, true }, stop)
}

// Subscribe reads subject into sink with a plain core NATS subscription:
// no replay, and what arrives while chatpulse is far behind is dropped by
// the client (and counted: Dropped).
func (b *Bus) Subscribe(subject string, sink ingest.Sink) (*Source, error) {
	ch := make(chan *nats.Msg, coreBuffer)
	sub, err := b.nc.ChanSubscribe(subject, ch)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	if err := b.nc.Flush(); err != nil { // the server has the subscription before anyone is told it is ready
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	b.events.Store(sub)
	conv := func(m *nats.Msg) (ingest.Msg, bool) {
		return ingest.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header, Sink: sink}, true
	}
	return newSource(ch, conv, func() {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			b.log.Warn("drain subscription", "err", err)
		}
		for deadline := time.Now().Add(5 * time.Second); sub.IsValid() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}), nil
}
