package group

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
)

// The stages of a partition: what reads its events, and which policies
// each feeds. Partition 0 also reads what the others cannot: the events
// stored under other subjects (stray) and, when there are group-scoped
// policies, every event for them (all).
const (
	stageRoom  = "room"
	stageUser  = "user"
	stageStray = "stray"
	stageAll   = "all"
)

// stage is one reading of a partition's events, and the feed that fills
// it. The user stage reads the events the room stage reads, again: it is
// quiet (ingest.Sink), so that each event is reported once. Every stage
// accepts only events whose subject names their room and user (match):
// those it was filed for.
type stage struct {
	*engine.Stage
	quiet bool
	match func(*ingest.Msg, *chat.Event) bool
	feed  feed
	fence *fence // the partition's

	// On the consumer's throttle goroutine: the alerts and the messages
	// over policies that act of the run being handled, sent by Handled if
	// the fence allows; onOver acts (nil: nothing acts).
	held   []throttle.Alert
	overs  []throttle.Over
	send   func(throttle.Alert)
	onOver func(throttle.Over)

	// applied is the stream sequence of the newest message the pipeline
	// has handled for the stage, whether the fence let it act or not: the
	// stage's state (aggregator, policies) is exactly that of its
	// messages up to there, once the pipeline holds none of it
	// (settled). What the fence held back of them (alerts, dead letters)
	// waits in unsent, under the fence's mu: a parked stage that resumes
	// sends it, one that does not leaves it to the next holder, who
	// handles those messages again.
	applied atomic.Uint64
	unsent  []func()
	// drain, if set, is closed by Handled once applied reaches drainTo:
	// the pipeline has handled all that a halted feed delivered
	// (drained). Under the fence's mu.
	drain   chan struct{}
	drainTo uint64
}

// A fence says whether a partition may still act: alerts, dead letters,
// progress. It may while this member holds the partition by the claim it
// runs by, until the lease's validity runs out (live), and never again
// once it is halted (stop) or once it found itself not live: what it
// handled meanwhile was neither alerted nor recorded, so it must not go
// on past it; lost then has the partition stopped, for the lease loop to
// claim it again and rebuild it. A stage's alerts are sent, and its
// sequence moved on, together under mu, so that when halt returns the
// stages' sequences say exactly which alerts went out: what the next
// holder must not send again.
type fence struct {
	mu     sync.Mutex
	halted bool
	live   func() bool
	lost   func() // called once, on a goroutine of its own, when it finds itself not live
}

// acting reports whether the partition may act now.
func (f *fence) acting() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.check()
}

// check is acting with f.mu held.
func (f *fence) check() bool {
	if f.halted {
		return false
	}
	if !f.live() {
		f.halted = true
		if f.lost != nil {
			go f.lost()
		}
		return false
	}
	return true
}

// halt ends the partition's acting; once it returns, no stage sends an
// alert or moves its sequence on.
func (f *fence) halt() {
	f.mu.Lock()
	f.halted = true
	f.mu.Unlock()
}

// Throttle feeds evs to the policies and holds their alerts for Handled.
func (s *stage) Throttle(evs []chat.Event, replay []bool, alert func(throttle.Alert)) {
	s.send = alert
	s.Stage.Throttle(evs, replay, s.hold)
}

func (s *stage) hold(a throttle.Alert) { s.held = append(s.held, a) }

func (s *stage) holdOver(o throttle.Over) { s.overs = append(s.overs, o) }

// Handled sends the run's alerts and records how far the stage has read,
// if the partition may still act; if it may not, neither: the next holder
// handles the run again, and alerts it, or, if this member gets the
// partition back and resumes the stage, it sends them then.
func (s *stage) Handled(seq uint64, caughtUp bool) {
	f := s.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.check() {
		for _, a := range s.held {
			if s.send != nil {
				s.send(a)
			}
		}
		for _, o := range s.overs {
			s.onOver(o)
		}
		s.Stage.Handled(seq, caughtUp)
	} else {
		if send := s.send; send != nil {
			for _, a := range s.held {
				s.unsent = append(s.unsent, func() { send(a) })
			}
		}
		for _, o := range s.overs {
			s.unsent = append(s.unsent, func() { s.onOver(o) })
		}
	}
	if seq > s.applied.Load() { // only this goroutine writes it
		s.applied.Store(seq)
	}
	if s.drain != nil && seq >= s.drainTo {
		close(s.drain)
		s.drain = nil
	}
	clear(s.held)
	s.held = s.held[:0]
	clear(s.overs)
	s.overs = s.overs[:0]
}

// act does f (a dead letter) now if the partition may act, or keeps it
// for a resume.
func (s *stage) act(f func()) {
	s.fence.mu.Lock()
	defer s.fence.mu.Unlock()
	if s.fence.check() {
		f()
		return
	}
	s.unsent = append(s.unsent, f)
}

// flush sends what the fence held back, if the partition may act now, and
// records the stage as handled through everything it took in.
func (s *stage) flush() {
	s.fence.mu.Lock()
	defer s.fence.mu.Unlock()
	if !s.fence.check() {
		return // lost again: it stays unsent
	}
	for _, f := range s.unsent {
		f()
	}
	s.unsent = nil
	s.Stage.Handled(s.applied.Load(), false)
}

// next is the first stream sequence a settled stage has not read: where
// it resumes.
func (s *stage) next() uint64 { return max(s.feed.First(), s.applied.Load()+1) }

// settled reports whether the pipeline holds nothing more of the stage's
// stopped feed.
func (s *stage) settled() bool { return s.applied.Load() >= s.feed.Last() }

// drained is closed once the pipeline holds nothing more of the stage's
// halted feed: a feed that delivers no more has a Last that moves no
// more, and Handled closes it when the stage's sequence reaches it.
func (s *stage) drained() <-chan struct{} {
	s.fence.mu.Lock()
	defer s.fence.mu.Unlock()
	ch := make(chan struct{})
	if last := s.feed.Last(); s.applied.Load() >= last {
		close(ch)
	} else {
		s.drain, s.drainTo = ch, last
	}
	return ch
}

// Quiet says whether the stage is a second reading of what another
// reports.
func (s *stage) Quiet() bool { return s.quiet }

// Accept rejects an event filed under a subject that does not name its
// room and user as subject_mismatch (docs/contract.md section 8).
func (s *stage) Accept(m *ingest.Msg, ev *chat.Event) *ingest.Error {
	if s.match(m, ev) {
		return nil
	}
	return &ingest.Error{Reason: ingest.ReasonSubjectMismatch,
		Msg: fmt.Sprintf("subject %s does not name the event's room %q and user %q", m.Subject, clip(ev.Room), clip(ev.User))}
}

// clip shortens a name quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// A feed is one stage's reading of the chat stream: a bus.Feed; the
// tests' is a fake.
type feed interface {
	First() uint64   // the first stream sequence it could deliver
	Last() uint64    // the sequence of the newest message it delivered
	Pending() uint64 // what it has yet to deliver, as of its last
	Halt()           // delivers nothing more, at once
	Stop()           // Halt, and end its consumer (may take seconds)
}

// stages makes partition p's stages: empty aggregators, and the policies
// in force (partitions.fresh).
func (m *Member) stages(p int) []*stage {
	r := m.rules.Load()
	var out []*stage
	// A stage that decides policies has a throttle set even when it has
	// none of them yet: a reload may give it some.
	add := func(name string, agg, quiet, thr bool, match func(*ingest.Msg, *chat.Event) bool) {
		s := &stage{Stage: &engine.Stage{Name: name}, quiet: quiet, match: match}
		if on := m.cfg.OnOver; on != nil {
			part := name + "." + strconv.Itoa(p)
			s.Stage.OnOver, s.onOver = s.holdOver, func(o throttle.Over) { on(part, o) }
		}
		if agg {
			s.Agg, _ = aggregator.New(m.cfg.Windows) // checked in New
		}
		if thr {
			s.Thr, _ = throttle.NewSet(r.ofStage(name)) // checked in New and Reconfigure
			if name == stageRoom {
				s.Thr.Moderate(m.cfg.Book) // a room's owner sees all its messages
			}
		}
		out = append(out, s)
	}
	// The room stage reports what it rejects; the user stage reads the
	// same events again, quietly.
	match := matchSubject(m.cfg.Subject)
	add(stageRoom, true, false, true, match)
	add(stageUser, true, true, true, match)
	if p == 0 {
		add(stageStray, false, false, false, func(*ingest.Msg, *chat.Event) bool { return false })
		if len(r.ofStage(stageAll)) > 0 {
			add(stageAll, false, true, true, match)
		}
	}
	return out
}

// matchSubject returns whether an event's subject, chat.<room>.<user>
// under subject chat.>, names the room and user of its payload: then the
// partitions the stream filed it under are those of its names, and it is
// counted by their owners, and by no others.
func matchSubject(subject string) func(*ingest.Msg, *chat.Event) bool {
	prefix := strings.TrimSuffix(subject, ">")
	return func(m *ingest.Msg, ev *chat.Event) bool {
		rest, ok := strings.CutPrefix(m.Subject, prefix)
		room, user, ok2 := strings.Cut(rest, ".")
		return ok && ok2 && chat.IsToken(room, ev.Room) && chat.IsToken(user, ev.User)
	}
}
