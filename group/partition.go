package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
		s.Stage.Handled(seq, caughtUp)
	} else if send := s.send; send != nil {
		for _, a := range s.held {
			s.unsent = append(s.unsent, func() { send(a) })
		}
	}
	if seq > s.applied.Load() { // only this goroutine writes it
		s.applied.Store(seq)
	}
	clear(s.held)
	s.held = s.held[:0]
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
	// warm is this member's earlier run of the partition, parked when its
	// lease was lost, that start may resume instead of rebuilding it; nil
	// once start has decided (before opened is closed).
	warm *partition
	// Of a parked partition: when it was parked, and whether every stage
	// had its feed (else it cannot be resumed: where it would read on is
	// not known), known once done is closed.
	parkedAt time.Time
	stopped  bool
	done     chan struct{} // closed when stop has stopped it

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
	pt := &partition{p: p, rev: rev, opened: make(chan struct{}), done: make(chan struct{})}
	pt.fence = &fence{live: func() bool { return m.leases.Table().Valid(p, rev, m.leases.Now()) }, lost: func() { m.leases.Expire(p, rev) }}
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
// takes round trips the lease loop must not wait for). If this member
// parked the partition when it lost its lease, and nobody held it since,
// its stages resume where they stopped (resume). Otherwise each stage
// loads the partition's snapshot, or replays from one largest window
// back. What the previous holder had handled (its progress) is marked
// Replay: no alerts or dead letters again. The lease one past the last
// partition is the filer's: it starts the filing instead (filer.go).
func (m *Member) start(p int, rev uint64) {
	if p == m.cfg.Partitions {
		m.startFiling(rev) // ready once it has filed what the copy holds
		return
	}
	m.mu.Lock()
	pt := m.newPartition(p, rev)
	pt.warm = m.parked[p]
	delete(m.parked, p)
	m.parts[p] = pt
	m.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	pt.cancel = cancel
	go func() {
		defer close(pt.opened)
		through, holder := m.replayThrough(ctx, pt)
		pt.through = through
		if seqs := m.resume(ctx, pt, holder); seqs != nil {
			m.starts.WithLabelValues(startWarm).Inc()
			m.open(ctx, pt, seqs)
			return
		}
		if ctx.Err() != nil {
			return // stopped already
		}
		// What a snapshot of the partition covers is not read again.
		seqs := m.restore(ctx, pt)
		if len(seqs) > 0 {
			m.starts.WithLabelValues(startSnapshot).Inc()
		} else {
			m.starts.WithLabelValues(startReplay).Inc()
		}
		m.open(ctx, pt, seqs)
	}()
}

// How a partition was started, for chatpulse_group_partition_starts_total.
const (
	startSnapshot = "snapshot" // its snapshot loaded, what came after it read
	startReplay   = "replay"   // one largest window read again
	startWarm     = "warm"     // resumed from the state this member had parked
)

// open starts the feeds of pt's stages, each from seqs[its name] (none:
// one largest window back), retrying each until it starts or ctx is
// done.
func (m *Member) open(ctx context.Context, pt *partition, seqs map[string]uint64) {
	p, through := pt.p, pt.through
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
			pause(ctx, time.Second)
		}
	}
}

// resume makes pt's stages those of this member's parked run of the
// partition (pt.warm), if it can be resumed exactly: nobody held the
// partition since (holder, the claim its progress was last written by,
// is the parked run's), the pipeline has taken in everything its feeds
// delivered, and the stream still holds what comes after. It sends what
// the fence held back when the lease was lost, under pt's claim, and
// returns where each stage reads on; nil if pt is to be built afresh.
//
// Exact: a parked stage's aggregator and policies are the stream's
// state up to the message it last took in, whatever consuming checks
// recorded there were this member's own (no one else held it); reading
// on from the next message gives what a rebuild would. A partition held
// by someone else meanwhile is not resumed: that holder's consuming
// checks are not in the stream.
func (m *Member) resume(ctx context.Context, pt *partition, holder uint64) map[string]uint64 {
	w := pt.warm
	if w == nil || ctx.Err() != nil {
		return nil // stopped already: stop parks it again
	}
	pt.warm = nil
	select { // its stop may still be stopping its feeds
	case <-w.done:
	case <-ctx.Done():
	}
	why := ""
	switch {
	case holder != w.rev:
		why = "its progress was written by another claim since" // or could not be read
	case !w.stopped:
		why = "its feeds had not all started"
	case !m.settle(ctx, w):
		why = "the pipeline had not handled what its feeds delivered"
	}
	seqs := map[string]uint64{}
	if why == "" {
		// The stream may be electing a leader too (the same node lost).
		var first uint64
		var err error
		for deadline := time.Now().Add(2 * m.cfg.Lease); ; pause(ctx, 250*time.Millisecond) {
			if first, _, err = m.bus.Seqs(ctx, m.cfg.Stream); err == nil || ctx.Err() != nil || time.Now().After(deadline) {
				break
			}
		}
		for _, s := range w.stages {
			seqs[s.Name] = s.next()
			switch {
			case err != nil:
				why = "the stream's first sequence is unknown: " + err.Error()
			case seqs[s.Name] < first:
				why = "the stream no longer holds where it stopped"
			}
		}
	}
	if why != "" {
		m.log.Warn("group: partition not resumed: rebuilt", "partition", pt.p, "why", why)
		m.retireAll(w)
		return nil
	}
	for _, s := range w.stages {
		s.fence = pt.fence
		s.OnCaughtUp = func() { m.caughtUp(pt) }
		s.Behind()
	}
	m.mu.Lock()
	pt.stages = w.stages
	m.mu.Unlock()
	for _, s := range pt.stages {
		s.flush()
	}
	return seqs
}

// settle waits, up to a write's deadline, until the pipeline holds
// nothing more of pt's stopped feeds.
func (m *Member) settle(ctx context.Context, pt *partition) bool {
	deadline := time.Now().Add(m.leases.WriteTimeout())
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if !slices.ContainsFunc(pt.stages, func(s *stage) bool { return !s.settled() }) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// sweepParked drops the parked partitions that will not come back: one
// another member holds now, or one parked two leases ago that is not
// this member's share, unless the bucket has been failing this member's
// writes within a lease (it is then likely that the lease loop will
// claim it again once the bucket answers). One of its share that nobody
// holds is kept: the lease loop claims it next.
func (m *Member) sweepParked(now time.Time) {
	t := m.leases.Table()
	var gone []*partition
	m.mu.Lock()
	for p, pt := range m.parked {
		o, owned := t.Owners[p]
		next := !owned && slices.Contains(t.Wants, p) // the lease loop claims it next
		stale := !next && now.Sub(pt.parkedAt) >= 2*m.cfg.Lease && now.Sub(t.Failed) >= m.cfg.Lease
		if owned && o.Instance != m.cfg.Instance || stale {
			delete(m.parked, p)
			gone = append(gone, pt)
			m.log.Warn("group: parked partition dropped", "partition", p, "owner", o.Instance)
		}
	}
	m.mu.Unlock()
	for _, pt := range gone {
		m.retireAll(pt)
	}
}

// retireAll keeps the counters of a partition's policies that is going
// away.
func (m *Member) retireAll(pt *partition) {
	for _, s := range pt.stages {
		if s.Thr != nil {
			m.retire(s.Thr.Stats())
		}
	}
}

// caughtUp tells the leases that a partition is ready once all of its
// stages have caught up.
func (m *Member) caughtUp(pt *partition) {
	if pt.ready() {
		m.leases.Ready(pt.p, pt.rev)
	}
}

// stop stops partition p, if it runs by claim: once it returns, nothing
// of it is answered or acted on any more (what its feeds delivered and the
// pipeline has not handled yet goes to sinks that neither alert nor
// record it), and how far it was handled is saved for the next holder.
// A partition whose lease was lost (lost) is parked, for start to resume
// if it comes back. The filer's lease stops the filing.
func (m *Member) stop(p int, claim uint64, lost bool) {
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
	// A partition whose lease was lost is parked at once, before it is
	// stopped (its progress write can take a write's deadline): the lease
	// loop may claim it again meanwhile, and start must find it (and waits
	// for done).
	var old *partition
	if lost {
		old, pt.parkedAt, m.parked[p] = m.parked[p], time.Now(), pt
	}
	m.mu.Unlock()
	if old != nil {
		m.retireAll(old)
	}
	defer close(pt.done)
	pt.fence.halt()
	pt.cancel()
	<-pt.opened
	// Its feeds deliver nothing more once halted; ending their consumers
	// can take seconds while the connection is away, and nothing waits
	// for it.
	pt.stopped = true
	var feeds []*bus.Feed
	for _, s := range pt.stages {
		if s.feed == nil {
			pt.stopped = false
			continue
		}
		s.feed.Halt()
		feeds = append(feeds, s.feed)
	}
	go func() {
		for _, f := range feeds {
			f.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), m.leases.WriteTimeout())
	m.saveProgress(ctx, pt)
	cancel()
	unpark := func(keep *partition) bool { // replaces pt with keep (nil: none) if start has not taken it
		m.mu.Lock()
		defer m.mu.Unlock()
		if !lost || m.parked[p] != pt {
			return false
		}
		if delete(m.parked, p); keep != nil {
			m.parked[p] = keep
		}
		return true
	}
	switch w := pt.warm; {
	case w != nil: // stopped before it decided: the parked run stays as it was, pt read nothing
		pt.warm = nil
		if !unpark(w) {
			m.retireAll(w)
		}
	case lost && !pt.stopped:
		if unpark(nil) {
			m.log.Warn("group: lost partition not kept: its feeds had not all started", "partition", p)
			m.retireAll(pt)
		} // else start took it, and rebuilds it
		return
	case lost:
		return // parked
	}
	m.retireAll(pt)
}

// replayThrough is, per stage, the newest stream sequence that the
// partition's previous holder had handled; with no previous holder, the
// stream's newest: what came before this group counted is history. It
// takes the progress key over (writes it, compare-and-set, as it found
// it), so that a previous holder that still writes to it fails from then
// on: what it handles after that is handled again here, and alerted once.
//
// It also returns the claim of the holder that last wrote the key (0:
// none, or unknown).
func (m *Member) replayThrough(ctx context.Context, pt *partition) (through map[string]uint64, holder uint64) {
	// A bucket that does not answer (a NATS node lost, a leader being
	// elected) is asked again for two leases: the partition cannot answer
	// before anyway, and going on without its progress would alert again
	// what its previous holder alerted.
	deadline := time.Now().Add(2 * m.cfg.Lease)
	for changed := 0; changed < 3; {
		var rev uint64
		var err error
		through, holder, rev, err = m.progress.get(ctx, pt.p)
		if errors.Is(err, bus.ErrNoKey) {
			last, err := m.bus.LastSeq(ctx, m.cfg.Stream)
			if err != nil {
				m.log.Warn("group: stream's last sequence unknown; replaying from the start as live", "err", err)
			}
			through = map[string]uint64{stageRoom: last, stageUser: last, stageStray: last, stageAll: last}
		} else if err != nil {
			if ctx.Err() != nil || time.Now().After(deadline) {
				m.log.Warn("group: progress unknown", "partition", pt.p, "err", err)
				return nil, 0
			}
			pause(ctx, 250*time.Millisecond)
			continue
		}
		rev, err = m.progress.take(ctx, pt.p, through, pt.rev, rev)
		switch {
		case err == nil:
			pt.progMu.Lock()
			pt.progRev, pt.progLast = rev, through
			pt.progMu.Unlock()
			return through, holder
		case errors.Is(err, bus.ErrKeyChanged): // the previous holder wrote it meanwhile: read it again
			changed++
		case ctx.Err() != nil || time.Now().After(deadline):
			m.log.Warn("group: progress not taken over", "partition", pt.p, "err", err)
			return through, holder
		default:
			pause(ctx, 250*time.Millisecond)
		}
	}
	m.log.Warn("group: progress not taken over: the previous holder keeps writing it", "partition", pt.p)
	return through, 0
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
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
	rev, err := m.progress.put(ctx, pt.p, seqs, pt.rev, pt.progRev)
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
	j := engine.Job{Name: m.snapshotName(pt.p), Acting: pt.fence.acting}
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
