package group

import (
	"context"
	"fmt"
	"strings"
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
	through map[string]uint64 // per stage, what the previous holder handled; set before opened is closed
	cancel  context.CancelFunc
	opened  chan struct{} // closed once its feeds are started, or given up
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
	r := m.rules.Load()
	// A stage that decides policies has a throttle set even when it has
	// none of them yet: a reload may give it some.
	add := func(name string, agg, quiet, thr bool, match func(*ingest.Msg, *chat.Event) bool) {
		s := &stage{Stage: &engine.Stage{Name: name}, quiet: quiet, match: match}
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
		m.startFiling()
		m.leases.ready(p, rev) // it has nothing to catch up
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
		through := m.replayThrough(ctx, p)
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

// stop stops partition p: once it returns, nothing of it is counted or
// answered any more (what its feeds delivered and the pipeline has not
// handled yet goes to sinks nobody reads). The filer's lease stops the
// filing.
func (m *Member) stop(p int) {
	if p == m.cfg.Partitions {
		m.stopFiling()
		return
	}
	m.mu.Lock()
	pt := m.parts[p]
	delete(m.parts, p)
	m.mu.Unlock()
	if pt == nil {
		return
	}
	pt.cancel()
	<-pt.opened
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
// stream's newest: what came before this group counted is history.
func (m *Member) replayThrough(ctx context.Context, p int) map[string]uint64 {
	if through, ok := m.progress.get(ctx, p); ok {
		return through
	}
	last, err := m.bus.LastSeq(ctx, m.cfg.Stream)
	if err != nil {
		m.log.Warn("group: stream's last sequence unknown; replaying from the start as live", "err", err)
	}
	return map[string]uint64{stageRoom: last, stageUser: last, stageStray: last, stageAll: last}
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
		if isOpen(pt) && pt.ready() {
			jobs = append(jobs, m.job(pt))
		}
	}
	return jobs
}
