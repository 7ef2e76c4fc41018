package group

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/group/lease"
	"github.com/chatpulse/chatpulse/throttle"
)

// A partition is this member's run of one partition, by one claim of its
// lease: its stages, the fence they act behind, and where the run is in
// its life (state).
type partition struct {
	p      int
	claim  uint64 // the revision of the lease write that claimed it
	state  state  // under partitions.mu
	stages []*stage
	fence  *fence
	cancel context.CancelFunc // ends its opening
	// through is, per stage, the newest stream sequence the previous
	// holder handled; set before opened is closed.
	through map[string]uint64
	opened  chan struct{} // closed once its opening is over: open, or given up
	// warm is this member's parked run of the partition, which the
	// opening resumes if it can; nil once the opening has decided
	// (before opened is closed).
	warm *partition
	// Of a run that stopped: when its lease was lost (it is parked while
	// it stops), and whether every stage had its feed (whole: where it
	// would read on is known, so it can be resumed), known once done is
	// closed.
	parkedAt time.Time
	whole    bool
	done     chan struct{} // closed when Stop has stopped it

	prog progressWrite // its progress, as this run last wrote it
}

// stage is pt's stage of that name, or nil.
func (pt *partition) stage(name string) *stage {
	for _, s := range pt.stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// caughtUp reports whether every stage has caught up: read what its feed
// held when it began. Then the lease says so, and the member answers for
// the partition.
func (pt *partition) caughtUp() bool {
	for _, s := range pt.stages {
		if !s.CaughtUp() {
			return false
		}
	}
	return true
}

// state is where a run of a partition is in its life. Every move is made
// by partitions, under its mu, and checked against this table:
//
//	from     to       by       when
//	-        opening  Start    the lease loop claimed it; this member's parked run of it becomes its warm
//	opening  open     opening  every stage's feed started: resumed from its warm, or loaded, or replayed
//	opening  halted   Stop     the lease ran out, or was given up, before it opened; its warm is parked again
//	open     halted   Stop     the lease ran out, was lost, or was given up
//	halted   parked   Stop     stopped; the lease was lost and every stage had its feed: kept to resume
//	halted   retired  Stop     stopped; the lease was given up, or not every feed had started
//	parked   resumed  opening  the next claim's run resumes it: its stages read on under that claim
//	parked   retired  opening  the next claim's run cannot resume it: someone held it since, the pipeline
//	                           still held its messages, or the stream no longer holds where it stopped
//	parked   retired  sweep    another member holds it, or it is stale (see sweep)
//	parked   retired  Stop     another run of the partition is parked over it
//	halted   retired  sweep    as parked: a run whose lease was lost is parked as it begins to stop
//
// Only an open run answers and acts, and only while its fence allows
// (stage.go). An opening or halted run counts nothing the member answers
// with. A parked run's state is exactly the stream's up to where it
// stopped, plus what the fence held back: resuming it is reading on.
type state uint8

const (
	opening state = iota // taking its progress over; resuming its warm, or loading; starting its feeds
	open                 // reading; it answers once caught up
	halted               // acts no more: its feeds stop, its progress is saved
	parked               // stopped when its lease was lost, kept whole for the next claim
	resumed              // its stages read on in the next claim's run
	retired              // gone: its policies' counters are kept in the member's totals
)

var stateNames = [...]string{"opening", "open", "halted", "parked", "resumed", "retired"}

func (s state) String() string { return stateNames[s] }

// moves are the table above: the states each state may move to.
var moves = map[state][]state{
	opening: {open, halted},
	open:    {halted},
	halted:  {parked, retired},
	parked:  {resumed, retired},
}

// partitions own the life of every partition this member runs or has
// parked. Start and Stop are what the lease loop has them do (through
// Member's hand); the opening of a run, and sweep, do the rest.
type partitions struct {
	self    string        // this member's name
	lease   time.Duration // the leases' ttl
	stream  string        // the chat stream
	subject string        // its events' subject filter (chat.>)
	leases  leaseView
	prog    *progress
	feeds   feeder
	// seqs are the chat stream's first and last sequences.
	seqs func(ctx context.Context) (first, last uint64, err error)
	// restore loads partition pt's snapshot into its fresh stages and
	// returns, per stage, the first sequence to read (none: no snapshot).
	restore func(ctx context.Context, pt *partition) map[string]uint64
	// fresh makes partition p's stages, empty, under the policies in
	// force; called with mu held, so that a reload finds the run.
	fresh func(p int) []*stage
	// from is where a stage with no snapshot reads from: one largest
	// window back.
	from   func() time.Time
	starts *prometheus.CounterVec // runs opened, by how
	log    *slog.Logger

	mu      sync.RWMutex
	runs    map[int]*partition // by partition: the run of this member's claim
	parked  map[int]*partition // by partition: halted or parked, lease lost
	retired map[string]throttle.PolicyStats
}

// leaseView is what a partition's life needs of the leases: a lease.Loop.
type leaseView interface {
	Table() *lease.Table
	Now() time.Time
	CaughtUp(p int, claim uint64)
	Expire(p int, claim uint64)
	WriteTimeout() time.Duration
}

// feeder starts feeds: bus.Feeds (busFeeds); the tests' is a fake.
type feeder interface {
	Start(ctx context.Context, c bus.FeedConfig) (feed, bool, error)
}

type busFeeds struct{ *bus.Feeds }

func (f busFeeds) Start(ctx context.Context, c bus.FeedConfig) (feed, bool, error) {
	fd, caughtUp, err := f.Feeds.Start(ctx, c)
	if err != nil {
		return nil, false, err
	}
	return fd, caughtUp, nil
}

// How a run was opened, for chatpulse_group_partition_starts_total.
const (
	startSnapshot = "snapshot" // its snapshot loaded, what came after it read
	startReplay   = "replay"   // one largest window read again
	startWarm     = "warm"     // resumed from the state this member had parked
)

// move moves pt to state to; the caller holds mu. A move the table does
// not have is a bug.
func (ps *partitions) move(pt *partition, to state) {
	if !slices.Contains(moves[pt.state], to) {
		panic(fmt.Sprintf("group: partition %d: %v -> %v", pt.p, pt.state, to))
	}
	pt.state = to
}

// retire moves pt to retired and keeps its policies' counters; the
// caller holds mu.
func (ps *partitions) retire(pt *partition) {
	ps.move(pt, retired)
	for _, s := range pt.stages {
		if s.Thr == nil {
			continue
		}
		for _, st := range s.Thr.Stats() {
			r := ps.retired[st.Policy]
			r.Evicted += st.Evicted
			r.Expired += st.Expired
			ps.retired[st.Policy] = r
		}
	}
}

// Start runs partition p by claim: a new run, opening on a goroutine of
// its own (opening takes round trips the lease loop must not wait for).
// It resumes this member's parked run of p, if it can (its warm).
func (ps *partitions) Start(p int, claim uint64) {
	pt := &partition{p: p, claim: claim, state: opening, opened: make(chan struct{}), done: make(chan struct{})}
	pt.fence = &fence{live: func() bool { return ps.leases.Table().Valid(p, claim, ps.leases.Now()) }, lost: func() { ps.leases.Expire(p, claim) }}
	var ctx context.Context
	ctx, pt.cancel = context.WithCancel(context.Background())
	ps.mu.Lock()
	pt.stages = ps.fresh(p)
	for _, s := range pt.stages {
		s.fence, s.OnCaughtUp = pt.fence, func() { ps.caughtUp(pt) }
	}
	pt.warm = ps.parked[p]
	delete(ps.parked, p)
	ps.runs[p] = pt
	ps.mu.Unlock()
	go ps.open(ctx, pt)
}

// caughtUp tells the leases that pt is ready once all its stages have
// caught up.
func (ps *partitions) caughtUp(pt *partition) {
	if pt.caughtUp() {
		ps.leases.CaughtUp(pt.p, pt.claim)
	}
}

// Stop stops partition p, if it runs by claim: once it returns, nothing
// of it is answered or acted on any more (what its feeds delivered and
// the pipeline has not handled yet goes to stages that neither alert nor
// record it), and how far it was handled is saved for the next holder.
// A run whose lease was lost (lost) is parked, for the next claim to
// resume. The lease loop and a lease's validity timer may both stop one
// claim: the second does nothing.
func (ps *partitions) Stop(p int, claim uint64, lost bool) {
	ps.mu.Lock()
	pt := ps.runs[p]
	if pt == nil || pt.claim != claim {
		ps.mu.Unlock()
		return
	}
	delete(ps.runs, p)
	ps.move(pt, halted)
	// A run whose lease was lost is parked as it begins to stop (its
	// progress write can take a write's deadline): the lease loop may
	// claim the partition again meanwhile, and Start must find it (its
	// opening waits for done).
	if lost {
		if old := ps.parked[p]; old != nil {
			ps.retire(old)
		}
		pt.parkedAt, ps.parked[p] = ps.leases.Now(), pt
	}
	ps.mu.Unlock()
	defer close(pt.done)
	pt.fence.halt()
	pt.cancel()
	<-pt.opened
	// Its feeds deliver nothing more once halted; ending their consumers
	// can take seconds while the connection is away, and nothing waits
	// for it.
	pt.whole = true
	var feeds []feed
	for _, s := range pt.stages {
		if s.feed == nil {
			pt.whole = false
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
	ctx, cancel := context.WithTimeout(context.Background(), ps.leases.WriteTimeout())
	ps.saveProgress(ctx, pt)
	cancel()

	ps.mu.Lock()
	defer ps.mu.Unlock()
	w := pt.warm
	if w != nil { // stopped before its opening decided: pt read nothing
		pt.warm = nil
		if lost && ps.parked[p] == pt {
			ps.parked[p] = w // parked as it was
		} else {
			ps.retire(w)
		}
	}
	switch {
	case pt.state == retired: // swept while it stopped
	case w != nil:
		ps.retire(pt)
	case lost && pt.whole:
		ps.move(pt, parked) // in ps.parked, or the warm of the next claim's run
	case lost:
		ps.log.Warn("group: lost partition not kept: its feeds had not all started", "partition", p)
		fallthrough
	default:
		if ps.parked[p] == pt {
			delete(ps.parked, p)
		}
		ps.retire(pt)
	}
}

// sweep retires the parked runs that will not be resumed: one whose
// partition another member holds now, and one parked two leases ago
// that is not this member's share, unless the bucket has been failing
// this member's writes within a lease (the lease loop is then likely to
// claim it again once the bucket answers). One of its share that nobody
// holds is kept: the lease loop claims it next.
func (ps *partitions) sweep() {
	t, now := ps.leases.Table(), ps.leases.Now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for p, pt := range ps.parked {
		o, owned := t.Owners[p]
		next := !owned && slices.Contains(t.Wants, p)
		stale := !next && now.Sub(pt.parkedAt) >= 2*ps.lease && now.Sub(t.Failed) >= ps.lease
		if owned && o.Instance != ps.self || stale {
			delete(ps.parked, p)
			ps.retire(pt)
			ps.log.Warn("group: parked partition dropped", "partition", p, "owner", o.Instance)
		}
	}
}

// run is the run of partition p this member holds now, or nil.
func (ps *partitions) run(p int) *partition {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return ps.runs[p]
}

// openRuns are the runs that are open: reading, and answering once caught
// up. The caller may hold neither mu nor the runs past the moment.
func (ps *partitions) openRuns() []*partition {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	out := make([]*partition, 0, len(ps.runs))
	for _, pt := range ps.runs {
		if pt.state == open {
			out = append(out, pt)
		}
	}
	return out
}

// view calls f with every run this member keeps the state of, running or
// parked (a parked run's keys are not tracked now), under mu: f reads, and
// must not block.
func (ps *partitions) view(f func(held iter.Seq2[*partition, bool])) {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	f(ps.held)
}

// change is view with mu held for writing: a reload changes every run's
// policies and what fresh makes, together.
func (ps *partitions) change(f func(held iter.Seq2[*partition, bool])) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	f(ps.held)
}

func (ps *partitions) held(yield func(*partition, bool) bool) {
	for _, pt := range ps.runs {
		if !yield(pt, true) {
			return
		}
	}
	for _, pt := range ps.parked {
		if !yield(pt, false) {
			return
		}
	}
}
