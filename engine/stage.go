package engine

import (
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
)

// A Stage is one reading of the chat stream into counts: an aggregator,
// the throttle policies that go with it, and how far it has read. A
// standalone instance has one; a group member, two or more for each
// partition it holds. It is the ingest.Sink the messages of its feed name,
// and what a snapshot saves and loads.
type Stage struct {
	Name string
	Agg  *aggregator.Aggregator // nil: counts nothing (nor anything late)
	Thr  *throttle.Set          // nil: no policies
	// OnCaughtUp, if set, is called on the consumer's goroutine once the
	// message marked CaughtUp has been handled.
	OnCaughtUp func()
	// OnOver, if set, is called on the consumer's throttle goroutine with
	// each message over a policy that acts (docs/contract.md section 14),
	// but those replayed: they were acted on when first handled.
	OnOver func(throttle.Over)

	seq      atomic.Uint64 // stream sequence of the newest message handled
	caughtUp atomic.Bool
}

// Seq is the stream sequence of the newest message the stage has handled
// (its throttle policies included).
func (s *Stage) Seq() uint64 { return s.seq.Load() }

// CaughtUp reports whether the stage has caught up: read what its feed
// held when it began.
func (s *Stage) CaughtUp() bool { return s.caughtUp.Load() }

// MarkCaughtUp says the stage has caught up: its feed began with nothing
// to read, or it has none (core NATS).
func (s *Stage) MarkCaughtUp() { s.caughtUp.Store(true) }

// Behind says the stage has not caught up (any more): it reads on after
// a pause, and has caught up again once its feed says so (a group member
// resuming a partition it had parked).
func (s *Stage) Behind() { s.caughtUp.Store(false) }

// Accept takes every event: a stage reads only what its feed selects.
func (s *Stage) Accept(*ingest.Msg, *chat.Event) *ingest.Error { return nil }

// Count counts evs in the aggregator, which marks the repeated joins and
// leaves in them (chat.KindRepeat) for Throttle.
func (s *Stage) Count(now int64, evs []chat.Event, late []int) []int {
	if s.Agg == nil {
		return late
	}
	return s.Agg.Observe(now, evs, late)
}

// Throttle feeds evs to the policies; the alerts and acts of replayed
// events went out when they were first handled, and are dropped.
func (s *Stage) Throttle(evs []chat.Event, replay []bool, alert func(throttle.Alert)) {
	if s.Thr == nil {
		return
	}
	var over func(int, throttle.Over)
	if s.OnOver != nil {
		over = func(i int, o throttle.Over) {
			if !replay[i] {
				s.OnOver(o)
			}
		}
	}
	s.Thr.ObserveBatch(evs, func(i int, a throttle.Alert) {
		if !replay[i] && alert != nil {
			alert(a)
		}
	}, over)
}

// Handled records how far the stage has read.
func (s *Stage) Handled(seq uint64, caughtUp bool) {
	if seq != 0 {
		s.seq.Store(seq)
	}
	if caughtUp {
		s.caughtUp.Store(true)
		if s.OnCaughtUp != nil {
			s.OnCaughtUp()
		}
	}
}

// Quiet is false: a stage reports what it rejects.
func (s *Stage) Quiet() bool { return false }

// load loads a snapshot's stage into s, a fresh stage: the aggregator
// and the throttle set at once, as they share nothing, with collections
// held meanwhile (holdGC).
func (s *Stage) load(agg, thr []byte) error {
	if (s.Agg != nil) != (len(agg) > 0) || (s.Thr != nil) != (len(thr) > 0) {
		return errNotThisStage
	}
	defer holdGC()()
	var aggErr, thrErr error
	var wg sync.WaitGroup
	if s.Thr != nil {
		wg.Go(func() { thrErr = s.Thr.LoadState(thr) })
	}
	if s.Agg != nil {
		aggErr = s.Agg.LoadState(agg)
	}
	wg.Wait()
	if aggErr != nil {
		return aggErr
	}
	return thrErr
}

// Loading a state builds a heap of which nearly every byte stays: a
// collection meanwhile marks what it must keep and frees next to nothing.
// From an empty heap the pacer runs one at each doubling, marking about
// twice the state in all; beside a live heap (a group member taking over
// a partition), one that marks both. So collections wait while any stage
// loads, and run once after (GOMEMLIMIT, if set, still holds: the runtime
// collects at the limit whatever the percent). The count keeps
// overlapping loads from restoring each other's percent.
var gcHold struct {
	sync.Mutex
	loads   int
	percent int // the setting before the first load
}

// holdGC stops collections until the function it returns is called.
func holdGC() (release func()) {
	gcHold.Lock()
	if gcHold.loads++; gcHold.loads == 1 {
		gcHold.percent = debug.SetGCPercent(-1)
	}
	gcHold.Unlock()
	return func() {
		gcHold.Lock()
		if gcHold.loads--; gcHold.loads == 0 {
			debug.SetGCPercent(gcHold.percent)
		}
		gcHold.Unlock()
	}
}

// reset empties a stage that may have been loaded in part.
func (s *Stage) reset() {
	if s.Agg != nil {
		s.Agg.Reset()
	}
	if s.Thr != nil {
		s.Thr.Reset()
	}
}
