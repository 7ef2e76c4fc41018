package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
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
	feed  *bus.Feed
	fence *fence // the partition's

	// On the consumer's throttle goroutine: the alerts of the run being
	// handled, sent by Handled if the fence allows.
	held []throttle.Alert
	send func(throttle.Alert)
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

// Handled sends the run's alerts and records how far the stage has read,
// if the partition may still act; if it may not, neither: the next holder
// handles the run again, and alerts it.
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
		s.Stage.Handled(seq, caughtUp)
	}
	clear(s.held)
	s.held = s.held[:0]
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

// partition is what this member runs for a partition it holds.
type partition struct {
	p       int
	rev     uint64 // the claim it belongs to
	stages  []*stage
	fence   *fence
	through map[string]uint64 // per stage, what the previous holder handled; set before opened is closed
	cancel  context.CancelFunc
	opened  chan struct{} // closed once its feeds are started, or given up

	progMu   sync.Mutex        // guards progRev and progLast: the ticker and stop both save progress
	progRev  uint64            // revision of our last write of its progress (0: none to compare with)
	progLast map[string]uint64 // what that write said
}

func (pt *partition) stage(name string) *stage {
	for _, s := range pt.stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// ready reports whether every stage has caught up.
func (pt *partition) ready() bool {
	for _, s := range pt.stages {
		if !s.Ready() {
			return false
		}
	}
	return true
}

// newPartition makes partition p's stages: empty aggregators and policies,
// those in force (the caller holds m.mu, so that a reload finds it in
// m.parts, or comes before).
func (m *Member) newPartition(p int, rev uint64) *partition {
	pt := &partition{p: p, rev: rev, opened: make(chan struct{})}
	pt.fence = &fence{live: func() bool { return m.leases.table().valid(p, rev, time.Now()) }, lost: func() { m.leases.expire(p, rev) }}
	r := m.rules.Load()
	// A stage that decides policies has a throttle set even when it has
	// none of them yet: a reload may give it some.
	add := func(name string, agg, quiet, thr bool, match func(*ingest.Msg, *chat.Event) bool) {
		s := &stage{Stage: &engine.Stage{Name: name}, quiet: quiet, match: match, fence: pt.fence}
		if agg {
			s.Agg, _ = aggregator.New(m.cfg.Windows) // checked in New
		}
		if thr {
			s.Thr, _ = throttle.NewSet(r.ofStage(name)) // checked in New and Reconfigure
			if name == stageRoom {
				s.Thr.Moderate(m.cfg.Book) // a room's owner sees all its messages
			}
		}
		s.OnCaughtUp = func() { m.caughtUp(pt) }
		pt.stages = append(pt.stages, s)
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
	return pt
}

// filter is the subject a stage of partition p reads.
func (m *Member) filter(p int, name string) string {
	switch name {
	case stageRoom:
		return bus.RoomPartition(p)
	case stageUser:
		return bus.UserPartition(p)
	case stageStray:
		return m.cfg.Subject
	}
	return bus.AllPartitions
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

// start opens partition p's feeds, on a goroutine of its own (opening
// takes round trips the lease loop must not wait for). Each stage replays
// from one largest window back; what the previous holder had handled
// (its progress) is marked Replay: no alerts or dead letters again.
// The lease one past the last partition is the filer's: it starts the
// filing instead (filer.go).
func (m *Member) start(p int, rev uint64) {
	if p == m.cfg.Partitions {
		m.startFiling(rev) // ready once it has filed what the copy holds
		return
	}
	m.mu.Lock()
	pt := m.newPartition(p, rev)
	m.parts[p] = pt
	m.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	pt.cancel = cancel
	go func() {
		defer close(pt.opened)
		through := m.replayThrough(ctx, pt)
		pt.through = through
		// What a snapshot of the partition covers is not read again.
		seqs := m.restore(ctx, pt)
		from := m.cfg.ReplayFrom()
		for _, s := range pt.stages {
			for ctx.Err() == nil {
				feed, caughtUp, err := m.feeds.Start(ctx, bus.FeedConfig{
					Stream: m.cfg.Stream, Filter: m.filter(p, s.Name), FromTime: from, FromSeq: seqs[s.Name],
					ReplayThrough: through[s.Name], Sink: s, Subject: m.cfg.Subject,
				})
				if err == nil {
					s.feed = feed
					if caughtUp {
						s.MarkReady()
						m.caughtUp(pt)
					}
					break
				}
				m.log.Warn("group: partition feed not started; retrying", "partition", p, "stage", s.Name, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
}

// caughtUp tells the leases that a partition is ready once all of its
// stages have caught up.
func (m *Member) caughtUp(pt *partition) {
	if pt.ready() {
		m.leases.ready(pt.p, pt.rev)
	}
}

// stop stops partition p, if it runs by claim: once it returns, nothing
// of it is answered or acted on any more (what its feeds delivered and the
// pipeline has not handled yet goes to sinks that neither alert nor
// record it), and how far it was handled is saved for the next holder.
// The filer's lease stops the filing.
func (m *Member) stop(p int, claim uint64) {
	if p == m.cfg.Partitions {
		m.stopFiling(claim)
		return
	}
	m.mu.Lock()
	pt := m.parts[p]
	if pt == nil || pt.rev != claim {
		m.mu.Unlock()
		return
	}
	delete(m.parts, p)
	m.mu.Unlock()
	pt.fence.halt()
	pt.cancel()
	<-pt.opened
	ctx, cancel := context.WithTimeout(context.Background(), m.leases.writeTimeout())
	m.saveProgress(ctx, pt)
	cancel()
	for _, s := range pt.stages {
		if s.feed != nil {
			s.feed.Stop()
		}
		if s.Thr != nil {
			m.retire(s.Thr.Stats())
		}
	}
}

// replayThrough is, per stage, the newest stream sequence that the
// partition's previous holder had handled; with no previous holder, the
// stream's newest: what came before this group counted is history. It
// takes the progress key over (writes it, compare-and-set, as it found
// it), so that a previous holder that still writes to it fails from then
// on: what it handles after that is handled again here, and alerted once.
func (m *Member) replayThrough(ctx context.Context, pt *partition) map[string]uint64 {
	var through map[string]uint64
	for range 3 {
		var rev uint64
		var err error
		through, rev, err = m.progress.get(ctx, pt.p)
		if err != nil && !errors.Is(err, bus.ErrNoKey) {
			m.log.Warn("group: progress unknown", "partition", pt.p, "err", err)
			break
		}
		if errors.Is(err, bus.ErrNoKey) {
			last, err := m.bus.LastSeq(ctx, m.cfg.Stream)
			if err != nil {
				m.log.Warn("group: stream's last sequence unknown; replaying from the start as live", "err", err)
			}
			through = map[string]uint64{stageRoom: last, stageUser: last, stageStray: last, stageAll: last}
		}
		rev, err = m.progress.take(ctx, pt.p, through, rev)
		if err == nil {
			pt.progMu.Lock()
			pt.progRev, pt.progLast = rev, through
			pt.progMu.Unlock()
			return through
		}
		if !errors.Is(err, bus.ErrKeyChanged) {
			m.log.Warn("group: progress not taken over", "partition", pt.p, "err", err)
			return through
		}
		// The previous holder wrote it meanwhile: read it again.
	}
	m.log.Warn("group: progress not taken over: the previous holder keeps writing it", "partition", pt.p)
	return through
}

// saveProgress writes how far partition pt has been handled, if that
// moved since its last write, compare-and-set on that write's revision:
// it fails once the next holder has taken the key over.
func (m *Member) saveProgress(ctx context.Context, pt *partition) {
	if !isOpen(pt) {
		return
	}
	seqs := map[string]uint64{}
	for _, s := range pt.stages {
		seqs[s.Name] = max(s.Seq(), pt.through[s.Name])
	}
	pt.progMu.Lock()
	defer pt.progMu.Unlock()
	if maps.Equal(seqs, pt.progLast) {
		return
	}
	rev, err := m.progress.put(ctx, pt.p, seqs, pt.progRev)
	if err != nil {
		m.log.Warn("group: progress not recorded", "partition", pt.p, "err", err)
		return
	}
	pt.progRev, pt.progLast = rev, seqs
}

// Snapshots of a group (docs/contract.md section 9): one object per partition,
// holding its stages, saved by its owner and loaded by whoever holds it
// next, who then reads only what came after each stage's sequence.

func (m *Member) snapshotName(p int) string { return fmt.Sprintf("group.%s.p%d", m.cfg.Group, p) }

// job is the partition's snapshot: its stages.
func (m *Member) job(pt *partition) engine.Job {
	j := engine.Job{Name: m.snapshotName(pt.p)}
	for _, s := range pt.stages {
		j.Stages = append(j.Stages, s.Stage)
	}
	return j
}

// restore loads partition p's snapshot into its fresh stages, and returns
// per stage the first sequence to read (none: read from the start).
func (m *Member) restore(ctx context.Context, pt *partition) map[string]uint64 {
	if m.keeper == nil {
		return nil
	}
	first, _, err := m.bus.Seqs(ctx, m.cfg.Stream)
	if err != nil {
		m.log.Warn("group: no snapshot loaded", "partition", pt.p, "err", err)
		return nil
	}
	return m.keeper.Restore(ctx, m.job(pt), first)
}

// snapshots are the jobs of the snapshot loop: each partition this member
// holds and has caught up.
func (m *Member) snapshots() []engine.Job {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var jobs []engine.Job
	for _, pt := range m.parts {
		if isOpen(pt) && pt.ready() && pt.fence.acting() {
			jobs = append(jobs, m.job(pt))
		}
	}
	return jobs
}
