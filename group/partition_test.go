package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/group/internal/fake"
	"github.com/chatpulse/chatpulse/group/lease"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/throttle"
)

// The tests here drive a partition's life (partition.go's table) one
// move at a time, over a fake progress bucket, fake leases and fake
// feeds: no NATS, no pipeline (a test hands a stage its messages as the
// pipeline would, with Handled).

// lifeRig is one member's partitions over fakes.
type lifeRig struct {
	t      *testing.T
	clock  *fake.Clock
	kv     *fake.KV
	leases *fakeLeases
	feeds  *fakeFeeds
	first  atomic.Uint64 // the chat stream's first sequence
	ps     *partitions
}

const lifeLease = 4 * time.Second

func newLifeRig(t *testing.T) *lifeRig {
	t.Helper()
	r := &lifeRig{t: t, clock: fake.NewClock(), feeds: &fakeFeeds{}}
	r.kv = fake.NewKV(r.clock, time.Hour, &fake.Trace{})
	r.leases = &fakeLeases{clock: r.clock, table: &lease.Table{Members: map[string]lease.Member{}, Owners: map[int]lease.Owner{}, Mine: map[int]lease.Grant{}}}
	r.first.Store(1)
	starts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "starts"}, []string{"how"})
	policy := []throttle.Policy{{Name: "p", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgSlidingWindow,
		Limit: 1, Window: time.Hour, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce}}
	r.ps = &partitions{self: "a", lease: lifeLease, stream: "CHAT", subject: "chat.>", leases: r.leases, prog: &progress{kv: r.kv}, feeds: r.feeds,
		seqs:    func(context.Context) (uint64, uint64, error) { return r.first.Load(), 100, nil },
		restore: func(context.Context, *partition) map[string]uint64 { return nil },
		fresh: func(int) []*stage {
			room, _ := throttle.NewSet(policy)
			return []*stage{{Stage: &engine.Stage{Name: stageRoom, Thr: room}}, {Stage: &engine.Stage{Name: stageUser}}}
		},
		from: func() time.Time { return fake.T0 }, starts: starts, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		runs: map[int]*partition{}, parked: map[int]*partition{}, retired: map[string]throttle.PolicyStats{}}
	return r
}

// start has the lease loop claim partition p by claim, and returns the
// run; open waits for its opening to be over.
func (r *lifeRig) start(p int, claim uint64) *partition {
	r.t.Helper()
	r.leases.grant(p, claim, r.clock.Now().Add(lifeLease*3/4))
	r.ps.Start(p, claim)
	pt := r.ps.run(p)
	if pt == nil || pt.claim != claim {
		r.t.Fatalf("partition %d not running by claim %d after Start", p, claim)
	}
	return pt
}

func (r *lifeRig) open(p int, claim uint64) *partition {
	r.t.Helper()
	pt := r.start(p, claim)
	<-pt.opened
	r.want(pt, open)
	return pt
}

// stop is the lease loop stopping p's run by claim: lost says the lease
// ran out rather than being given up.
func (r *lifeRig) stop(p int, claim uint64, lost bool) {
	r.leases.revoke(p)
	r.ps.Stop(p, claim, lost)
}

func (r *lifeRig) want(pt *partition, s state) {
	r.t.Helper()
	r.ps.mu.RLock()
	got := pt.state
	r.ps.mu.RUnlock()
	if got != s {
		r.t.Fatalf("partition %d, claim %d: %v, want %v", pt.p, pt.claim, got, s)
	}
}

// parkedRun is p's parked run, or nil.
func (r *lifeRig) parkedRun(p int) *partition {
	r.ps.mu.RLock()
	defer r.ps.mu.RUnlock()
	return r.ps.parked[p]
}

func (r *lifeRig) starts(how string) float64 {
	return testutil.ToFloat64(r.ps.starts.WithLabelValues(how))
}

// handle hands each of pt's stages its messages through seq, as the
// pipeline would (the feed delivered them).
func handle(pt *partition, seq uint64) {
	for _, s := range pt.stages {
		s.feed.(*fakeFeed).last.Store(seq)
		s.Handled(seq, false)
	}
}

// A run opens once every stage's feed has started, reading from one
// largest window back and marking what the previous holder handled as
// replay; it is caught up, and the leases told so, once every stage is.
// Given up, it saves how far it handled and retires.
func TestPartitionOpensAndRetires(t *testing.T) {
	r := newLifeRig(t)
	r.feeds.setCaughtUp(true)
	pt := r.open(3, 7)
	if claim, ok := r.leases.readyOf(3); !ok || claim != 7 {
		t.Errorf("leases told ready: %d, %v; want claim 7", claim, ok)
	}
	for _, c := range r.feeds.configs() {
		if c.FromSeq != 0 || !c.FromTime.Equal(fake.T0) || c.ReplayThrough != 100 {
			t.Errorf("feed of %s from seq %d, time %v, replay through %d; want one largest window back, the stream's last as handled", c.Filter, c.FromSeq, c.FromTime, c.ReplayThrough)
		}
	}
	if r.starts(startReplay) != 1 {
		t.Errorf("replay starts: %v", r.starts(startReplay))
	}
	handle(pt, 120)
	r.stop(3, 7, false)
	r.want(pt, retired)
	if r.ps.run(3) != nil || r.parkedRun(3) != nil {
		t.Error("a run given up is still held")
	}
	through, holder, _, err := r.ps.prog.get(t.Context(), 3)
	if err != nil || holder != 7 || through[stageRoom] != 120 || through[stageUser] != 120 {
		t.Errorf("progress saved: %v by %d (%v); want 120 by claim 7", through, holder, err)
	}
	for _, f := range r.feeds.all() {
		if !f.halted.Load() {
			t.Error("a feed of a stopped run was not halted")
		}
	}
	// A second stop of the same claim (the lease's timer) does nothing.
	r.ps.Stop(3, 7, true)
	if r.parkedRun(3) != nil {
		t.Error("a second stop parked a retired run")
	}
}

// A run whose lease was lost parks; the next claim's run resumes it when
// nobody held the partition since: its stages read on from the message
// after the last they took in, what the fence held back is sent under
// the new claim, and they catch up again.
func TestPartitionParksAndResumes(t *testing.T) {
	r := newLifeRig(t)
	r.feeds.setCaughtUp(true)
	pt := r.open(0, 7)
	handle(pt, 40)
	r.stop(0, 7, true)
	r.want(pt, parked)
	if r.parkedRun(0) != pt {
		t.Fatal("a lost run is not parked")
	}
	r.feeds.setCaughtUp(false)
	again := r.open(0, 9)
	r.want(pt, resumed)
	if r.parkedRun(0) != nil {
		t.Error("a resumed run is still parked")
	}
	if !slices.Equal(again.stages, pt.stages) {
		t.Error("the new run does not read on with the parked run's stages")
	}
	for _, s := range again.stages {
		if s.fence != again.fence || s.CaughtUp() {
			t.Errorf("stage %s: fence of the new claim %v, ready %v; want the new claim's, behind", s.Name, s.fence == again.fence, s.CaughtUp())
		}
		if s.Seq() != 40 {
			t.Errorf("stage %s resumed at %d, want 40", s.Name, s.Seq())
		}
	}
	cs := r.feeds.configs()
	for _, c := range cs[len(cs)-2:] {
		if c.FromSeq != 41 {
			t.Errorf("resumed feed of %s from %d, want 41", c.Filter, c.FromSeq)
		}
	}
	if r.starts(startWarm) != 1 {
		t.Errorf("warm starts: %v", r.starts(startWarm))
	}
}

// A parked run is not resumed, but retired and the partition rebuilt,
// when it cannot be resumed exactly.
func TestPartitionRebuilds(t *testing.T) {
	cases := []struct {
		name string
		// between runs with the lease lost at claim 7 and the next
		// claim 9: what happens meanwhile
		meanwhile func(r *lifeRig, pt *partition)
	}{
		{"someone held it since", func(r *lifeRig, pt *partition) {
			if _, err := r.ps.prog.put(r.t.Context(), 0, map[string]uint64{stageRoom: 50, stageUser: 50}, 8, 0); err != nil {
				r.t.Fatal(err)
			}
		}},
		{"the stream no longer holds where it stopped", func(r *lifeRig, pt *partition) { r.first.Store(60) }},
		{"the pipeline still holds its messages", func(r *lifeRig, pt *partition) {
			pt.stages[0].feed.(*fakeFeed).last.Store(45) // delivered, never handled
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newLifeRig(t)
			pt := r.open(0, 7)
			handle(pt, 40)
			r.stop(0, 7, true)
			c.meanwhile(r, pt)
			again := r.open(0, 9)
			r.want(pt, retired)
			if slices.Equal(again.stages, pt.stages) || r.starts(startReplay) != 2 || r.starts(startWarm) != 0 {
				t.Errorf("resumed: %v, replay starts %v, warm %v; want a rebuild", slices.Equal(again.stages, pt.stages), r.starts(startReplay), r.starts(startWarm))
			}
		})
	}
}

// A run stopped with its lease lost before every stage had its feed is
// not parked: where it would read on is not known.
func TestPartitionLostBeforeEveryFeed(t *testing.T) {
	r := newLifeRig(t)
	r.feeds.setFail(errors.New("no stream leader"))
	pt := r.start(0, 7)
	wait.For(t, 10*time.Second, func() error {
		if n := r.feeds.tries(); n == 0 {
			return errors.New("no feed tried yet")
		}
		return nil
	})
	r.stop(0, 7, true)
	r.want(pt, retired)
	if r.parkedRun(0) != nil {
		t.Error("a run without its feeds is parked")
	}
}

// Stopped before its opening decided whether to resume its warm run
// (stop-before-open): the new run read nothing and retires; the warm run
// is parked again as it was if the lease was lost, and retired if it was
// given up.
func TestPartitionStopBeforeOpen(t *testing.T) {
	for _, lost := range []bool{true, false} {
		t.Run(fmt.Sprintf("lost %v", lost), func(t *testing.T) {
			r := newLifeRig(t)
			warm := r.open(0, 7)
			handle(warm, 40)
			r.stop(0, 7, true)
			hold := make(chan struct{})
			r.kv.SetFault(func(op, key string) error {
				if key == progressKey(0) {
					<-hold // the opening takes the progress over, slowly
				}
				return nil
			})
			pt := r.start(0, 9)
			stopped := make(chan struct{})
			go func() { defer close(stopped); r.stop(0, 9, lost) }()
			wait.For(t, 10*time.Second, func() error {
				if r.ps.run(0) != nil {
					return errors.New("still running")
				}
				return nil
			})
			r.kv.SetFault(nil)
			close(hold)
			<-stopped
			r.want(pt, retired)
			if lost {
				r.want(warm, parked)
				if r.parkedRun(0) != warm {
					t.Error("the warm run is not parked again")
				}
			} else {
				r.want(warm, retired)
				if r.parkedRun(0) != nil {
					t.Error("a run is parked after its partition was given up")
				}
			}
		})
	}
}

// sweep retires the parked runs that will not be resumed, and keeps the
// others, by each of its rules.
func TestPartitionSweep(t *testing.T) {
	cases := []struct {
		name   string
		after  time.Duration // since it was parked
		owner  string        // the partition's owner now ("": none)
		wanted bool          // this member's share
		failed time.Duration // since the bucket last failed a write (0: never)
		kept   bool
	}{
		{name: "another member holds it", after: time.Second, owner: "b"},
		{name: "this member claimed it again: its run takes it", after: time.Second, owner: "a", kept: true},
		{name: "its share, nobody holds it: claimed next", after: 3 * lifeLease, wanted: true, kept: true},
		{name: "not its share, parked a lease ago", after: lifeLease, kept: true},
		{name: "not its share, two leases ago", after: 2 * lifeLease},
		{name: "not its share, two leases ago, bucket failing", after: 2 * lifeLease, failed: lifeLease / 2, kept: true},
		{name: "not its share, two leases ago, bucket failed a lease ago", after: 2 * lifeLease, failed: lifeLease},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newLifeRig(t)
			pt := r.open(0, 7)
			handle(pt, 40)
			r.stop(0, 7, true)
			r.clock.Advance(c.after)
			r.leases.set(func(tb *lease.Table) {
				if c.owner != "" {
					tb.Owners[0] = lease.Owner{Instance: c.owner}
				}
				if c.wanted {
					tb.Wants = []int{0}
				}
				if c.failed > 0 {
					tb.Failed = r.clock.Now().Add(-c.failed)
				}
			})
			r.ps.sweep()
			if kept := r.parkedRun(0) == pt; kept != c.kept {
				t.Fatalf("kept %v, want %v", kept, c.kept)
			}
			if c.kept {
				r.want(pt, parked)
			} else {
				r.want(pt, retired)
			}
		})
	}
}

// fakeLeases are the leases a partition's life sees: a table the test
// sets, on the fake clock.
type fakeLeases struct {
	clock *fake.Clock
	mu    sync.Mutex
	table *lease.Table
	ready map[int]uint64
}

func (l *fakeLeases) Table() *lease.Table {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.table
}

func (l *fakeLeases) Now() time.Time              { return l.clock.Now() }
func (l *fakeLeases) WriteTimeout() time.Duration { return 200 * time.Millisecond }
func (l *fakeLeases) Expire(int, uint64)          {}

func (l *fakeLeases) CaughtUp(p int, claim uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ready == nil {
		l.ready = map[int]uint64{}
	}
	l.ready[p] = claim
}

func (l *fakeLeases) readyOf(p int) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.ready[p]
	return c, ok
}

// set changes a copy of the table and publishes it, as the lease loop
// does.
func (l *fakeLeases) set(f func(*lease.Table)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := *l.table
	t.Owners, t.Mine = maps.Clone(t.Owners), maps.Clone(t.Mine)
	f(&t)
	l.table = &t
}

func (l *fakeLeases) grant(p int, claim uint64, until time.Time) {
	l.set(func(t *lease.Table) { t.Mine[p] = lease.Grant{Claim: claim, Until: until} })
}

func (l *fakeLeases) revoke(p int) { l.set(func(t *lease.Table) { delete(t.Mine, p) }) }

// fakeFeeds start fake feeds, failing or saying they are caught up as
// the test sets.
type fakeFeeds struct {
	mu       sync.Mutex
	caughtUp bool
	fail     error
	started  []bus.FeedConfig
	feeds    []*fakeFeed
	n        int // Starts tried
}

func (f *fakeFeeds) Start(ctx context.Context, c bus.FeedConfig) (feed, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.fail != nil {
		return nil, false, f.fail
	}
	fd := &fakeFeed{first: max(c.FromSeq, 1)}
	f.started = append(f.started, c)
	f.feeds = append(f.feeds, fd)
	return fd, f.caughtUp, nil
}

func (f *fakeFeeds) setCaughtUp(v bool) { f.mu.Lock(); f.caughtUp = v; f.mu.Unlock() }
func (f *fakeFeeds) setFail(err error)  { f.mu.Lock(); f.fail = err; f.mu.Unlock() }
func (f *fakeFeeds) tries() int         { f.mu.Lock(); defer f.mu.Unlock(); return f.n }

func (f *fakeFeeds) configs() []bus.FeedConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.started)
}

func (f *fakeFeeds) all() []*fakeFeed {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.feeds)
}

// fakeFeed is a feed that delivered through last (as the test says).
type fakeFeed struct {
	first           uint64
	last            atomic.Uint64
	halted, stopped atomic.Bool
}

func (f *fakeFeed) First() uint64   { return f.first }
func (f *fakeFeed) Last() uint64    { return f.last.Load() }
func (f *fakeFeed) Pending() uint64 { return 0 }
func (f *fakeFeed) Halt()           { f.halted.Store(true) }
func (f *fakeFeed) Stop()           { f.Halt(); f.stopped.Store(true) }
