package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/group/internal/fake"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// The tests here drive the lease loop a step at a time, as run does, over
// a fake bucket and a fake clock: no JetStream, no sleeping.

// fenceTTL is the lease of these tests: ticks every second, answers for
// two seconds after a write's send, the key gone four seconds after.
const fenceTTL = 4 * time.Second

func memberValue(name string) []byte {
	v, _ := json.Marshal(Member{Instance: name})
	return v
}

func ownerValue(name string, ready bool) []byte {
	v, _ := json.Marshal(Owner{Instance: name, Ready: ready})
	return v
}

// rig is one member's lease loop, driven by hand.
type rig struct {
	t     *testing.T
	ctx   context.Context
	clock *fake.Clock
	trace *fake.Trace
	kv    *fake.KV
	hand  *recHand
	l     *Loop
	w     <-chan *bus.Entry
	mark  int // trace events before it are not ours to check
}

// newRig makes member self's lease loop over a fake bucket that holds
// keys (written by others, in order, before we start), creates our member
// key as join does, and watches. The watch's first turn is the test's.
func newRig(t *testing.T, self string, partitions int, keys ...[2]string) *rig {
	t.Helper()
	r := &rig{t: t, ctx: t.Context(), clock: fake.NewClock(), trace: &fake.Trace{}}
	r.kv = fake.NewKV(r.clock, fenceTTL, r.trace)
	r.hand = newRecHand(r.trace)
	for _, kv := range keys {
		r.kv.Steal(kv[0], []byte(kv[1]))
	}
	r.l = New(r.kv, Config{Self: Member{Instance: self}, Slots: partitions, TTL: fenceTTL, Hand: r.hand, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r.l.clock, r.l.after = r.clock.Now, r.clock.AfterFunc
	if err := r.l.Join(r.ctx); err != nil {
		t.Fatal(err)
	}
	w, err := r.kv.WatchAll(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.w = w
	r.mark = len(r.trace.All())
	return r
}

// watchTurn is run's turn on a watch event: take in everything the watch
// has, then act. Nothing waiting, no turn.
func (r *rig) watchTurn() {
	took := false
	for more := true; more; {
		select {
		case e := <-r.w:
			r.l.apply(e)
			took = true
		default:
			more = false
		}
	}
	if took {
		r.l.settle(r.ctx)
	}
}

// tickAt is run's turn on a tick at fake.T0+d (or later, if a hang has moved
// the clock past it), then the watch's turn with the tick's writes.
func (r *rig) tickAt(d time.Duration) {
	r.clock.At(d)
	r.l.tick(r.ctx)
	r.l.settle(r.ctx)
	r.watchTurn()
}

// caughtUp is hand reporting partition p caught up by claim, then run's
// turn on it, then the watch's.
func (r *rig) caughtUp(p int, claim uint64) {
	r.l.CaughtUp(p, claim)
	r.notesTurn()
}

// notesTurn is run's turn on what hand and the timers told it, then the
// watch's; it fails the test if nothing woke the loop.
func (r *rig) notesTurn() {
	select {
	case <-r.l.notes:
	default:
		r.t.Fatal("nothing woke the loop")
	}
	r.l.takeNotes(r.ctx)
	r.l.settle(r.ctx)
	r.watchTurn()
}

// answers reports whether the published table lets us answer for p now.
func (r *rig) answers(p int) bool { return r.l.Table().Owns(p, r.clock.Now()) }

// ours is what happened since newRig (or the last call), without our
// member key's writes.
func (r *rig) ours() []string {
	all := r.trace.All()
	var got []string
	for _, e := range all[r.mark:] {
		if !strings.Contains(e, memberKey+r.l.self.Instance) {
			got = append(got, e)
		}
	}
	r.mark = len(all)
	return got
}

// checkFence checks what must hold at every step: a partition we run has
// a key that is ours and has not expired, and we answer only for
// partitions we run.
func (r *rig) checkFence(step string) {
	r.t.Helper()
	now := r.clock.Now()
	for p := range r.l.partitions {
		_, running := r.hand.claim(p)
		if r.answers(p) && !running {
			r.t.Errorf("%s: answers for partition %d, which it does not run", step, p)
		}
		if !running {
			continue
		}
		e, expires, ok := r.kv.Key(ownerKey + strconv.Itoa(p))
		var o Owner
		switch {
		case !ok:
			r.t.Errorf("%s: partition %d runs at %v with no key", step, p, now.Sub(fake.T0))
		case json.Unmarshal(e.Data, &o) != nil || o.Instance != r.l.self.Instance:
			r.t.Errorf("%s: partition %d runs at %v, but its key is %s", step, p, now.Sub(fake.T0), e.Data)
		case !now.Before(expires):
			r.t.Errorf("%s: partition %d runs at %v, but its key expired at %v", step, p, now.Sub(fake.T0), expires.Sub(fake.T0))
		}
	}
}

// heldRig is the leased partition 0 of member a, alone: claimed at fake.T0 and
// said ready at fake.T0, so it answers until 3/4 ttl.
func heldRig(t *testing.T) *rig {
	r := newRig(t, "a", 1)
	r.watchTurn()
	claim, ok := r.hand.claim(0)
	if !ok {
		t.Fatal("partition 0 not claimed")
	}
	r.caughtUp(0, claim)
	if !r.answers(0) {
		t.Fatal("partition 0 claimed and caught up, but not answered for")
	}
	r.ours()
	return r
}

// The fence: a partition answers and acts for 3/4 ttl from the send of its
// last write that went through, and one not renewed by then is stopped by
// its timer at that moment, whatever the loop is doing (a write that
// hangs), before its key can expire; one whose key someone else wrote is
// stopped at once.
func TestLeaseFence(t *testing.T) {
	s := time.Second
	timeout := func(r *rig, op, key string) error { return fake.ErrTimeout }
	type tick struct {
		at    time.Duration // when it comes; a hang moves the clock on
		held  bool          // partition 0 runs after it
		until time.Duration // and answers until fake.T0+until
	}
	cases := []struct {
		name   string
		before func(r *rig)                       // before the first tick
		fault  func(r *rig, op, key string) error // on each write that would go through
		ticks  []tick
		stops  int // times partition 0 is stopped
	}{{
		name: "renewals go through",
		ticks: []tick{
			{at: 1 * s, held: true, until: 4 * s},
			{at: 2 * s, held: true, until: 5 * s},
			{at: 3 * s, held: true, until: 6 * s},
		},
	}, {
		name: "renewals fail: answers until 3/4 ttl, stopped then by its timer",
		fault: func(r *rig, op, key string) error {
			if op == "update" {
				return fake.ErrTimeout
			}
			return nil
		},
		ticks: []tick{
			{at: 1 * s, held: true, until: 3 * s},
			{at: 2 * s, held: true, until: 3 * s},
			{at: 3 * s, held: false}, // and not claimed again: its key is there until 4s
		},
		stops: 1,
	}, {
		name:  "every write fails, the member key's too: the same",
		fault: timeout,
		ticks: []tick{
			{at: 1 * s, held: true, until: 3 * s},
			{at: 2 * s, held: true, until: 3 * s},
			{at: 3 * s, held: false},
		},
		stops: 1,
	}, {
		name: "a renewal fails once: the next one, a tick later, renews it in time",
		fault: func(r *rig, op, key string) error {
			if op == "update" && r.clock.Now().Equal(fake.T0.Add(s)) {
				return fake.ErrTimeout
			}
			return nil
		},
		ticks: []tick{
			{at: 1 * s, held: true, until: 3 * s},
			{at: 2 * s, held: true, until: 5 * s},
			{at: 3 * s, held: true, until: 6 * s},
		},
	}, {
		name:   "a lost compare-and-set: stopped at once",
		before: func(r *rig) { r.kv.Steal(ownerKey+"0", ownerValue("b", false)) },
		ticks: []tick{
			{at: 1 * s, held: false}, // though its lease had a second to go
			{at: 2 * s, held: false}, // and not claimed again: b holds the key
		},
		stops: 1,
	}, {
		name: "the member key's write hangs past 3/4 ttl and fails: stopped by its timer meanwhile",
		fault: func(r *rig, op, key string) error {
			if op == "put" {
				r.clock.Advance(2500 * time.Millisecond)
			}
			return fake.ErrTimeout
		},
		ticks: []tick{
			{at: 1 * s, held: false}, // at 3.5s
		},
		stops: 1,
	}, {
		name: "a renewal hangs past 3/4 ttl and fails: stopped by its timer meanwhile",
		fault: func(r *rig, op, key string) error {
			if op == "update" && r.clock.Now().Equal(fake.T0.Add(s)) {
				r.clock.Advance(2500 * time.Millisecond)
			}
			if op == "update" {
				return fake.ErrTimeout
			}
			return nil
		},
		ticks: []tick{
			{at: 1 * s, held: false}, // returns at 3.5s
		},
		stops: 1,
	}, {
		name: "a renewal hangs past 3/4 ttl and goes through: stopped meanwhile, not brought back; released",
		fault: func(r *rig, op, key string) error {
			if op == "update" && r.clock.Now().Equal(fake.T0.Add(s)) {
				r.clock.Advance(2500 * time.Millisecond)
			}
			return nil
		},
		ticks: []tick{
			{at: 1 * s, held: true, until: 6500 * time.Millisecond}, // back at 3.5s: released, and claimed again then
		},
		stops: 1,
	}, {
		name: "a renewal that hangs then goes through counts from its send",
		fault: func(r *rig, op, key string) error {
			if op == "update" && r.clock.Now().Equal(fake.T0.Add(s)) {
				r.clock.Advance(500 * time.Millisecond)
			}
			return nil
		},
		ticks: []tick{
			{at: 1 * s, held: true, until: 4 * s}, // sent at 1s, back at 1.5s
			{at: 2 * s, held: true, until: 5 * s},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := heldRig(t)
			if c.before != nil {
				c.before(r)
			}
			if c.fault != nil {
				r.kv.SetFault(func(op, key string) error { return c.fault(r, op, key) })
			}
			for _, k := range c.ticks {
				r.tickAt(k.at)
				step := fmt.Sprintf("tick at %v (clock %v)", k.at, r.clock.Now().Sub(fake.T0))
				r.checkFence(step)
				claim, running := r.hand.claim(0)
				if running != k.held {
					t.Fatalf("%s: partition 0 runs: %v, want %v; trace %q", step, running, k.held, r.trace.All())
				}
				if !k.held {
					continue
				}
				r.caughtUp(0, claim)
				if until := r.l.Table().Mine[0].Until; !until.Equal(fake.T0.Add(k.until)) {
					t.Errorf("%s: answers until %v, want %v", step, until.Sub(fake.T0), k.until)
				}
				if want := r.clock.Now().Before(fake.T0.Add(k.until)); r.answers(0) != want {
					t.Errorf("%s: answers %v, want %v", step, r.answers(0), want)
				}
			}
			if n := count(r.trace.All(), "stop 0"); n != c.stops {
				t.Errorf("stopped %d times, want %d; trace %q", n, c.stops, r.trace.All())
			}
		})
	}
}

func count(events []string, e string) int {
	n := 0
	for _, x := range events {
		if x == e {
			n++
		}
	}
	return n
}

// Claims, releases and ready flags: what the loop writes, and what it has
// hand start and stop, in order.
func TestLeaseOwnership(t *testing.T) {
	s := time.Second
	var four []int // the partitions of 0..3 that rendezvous gives b among a and b
	for p := range 4 {
		if OwnerOf(p, []string{"a", "b"}) == "b" {
			four = append(four, p)
		}
	}
	if len(four) == 0 || len(four) == 4 {
		t.Fatalf("rendezvous gives b %v of 4: pick other names", four)
	}
	cases := []struct {
		name       string
		partitions int
		keys       [][2]string // others' keys, there before a joins
		script     func(r *rig) []string
		want       []string // trace, our member key's writes left out
	}{{
		name:       "claims a free partition; says it is ready once hand has caught up",
		partitions: 1,
		script: func(r *rig) []string {
			r.watchTurn()
			if r.answers(0) {
				r.t.Error("answers for partition 0 before it caught up")
			}
			claim, _ := r.hand.claim(0)
			r.caughtUp(0, claim)
			if !r.answers(0) {
				r.t.Error("does not answer for partition 0 once caught up")
			}
			return r.ours()
		},
		want: []string{"create owner.0", "start 0", "update owner.0"},
	}, {
		name:       "a caught-up report for another claim writes nothing",
		partitions: 1,
		script: func(r *rig) []string {
			r.watchTurn()
			claim, _ := r.hand.claim(0)
			r.caughtUp(0, claim+1)
			if r.answers(0) {
				r.t.Error("answers for partition 0, caught up by another claim")
			}
			return r.ours()
		},
		want: []string{"create owner.0", "start 0"},
	}, {
		name:       "does not claim a partition another holds",
		partitions: 1,
		keys:       [][2]string{{ownerKey + "0", string(ownerValue("b", true))}}, // b's member key is gone, its lease not yet
		script: func(r *rig) []string {
			r.watchTurn()
			return r.ours()
		},
		want: nil,
	}, {
		name:       "claims it once the holder's lease has run out",
		partitions: 1,
		keys:       [][2]string{{ownerKey + "0", string(ownerValue("b", true))}},
		script: func(r *rig) []string {
			r.watchTurn()
			for at := s; at <= fenceTTL; at += s {
				r.tickAt(at) // at 4s the server expires b's key, and tells us
			}
			return r.ours()
		},
		want: []string{"create owner.0", "start 0"},
	}, {
		name:       "loses the race to claim: not started, not tried again",
		partitions: 1,
		script: func(r *rig) []string {
			r.kv.SetFault(func(op, key string) error {
				if op == "create" && key == ownerKey+"0" {
					r.kv.Steal(key, ownerValue("b", false)) // b was quicker
					return fmt.Errorf("fake kv: %w", bus.ErrKeyChanged)
				}
				return nil
			})
			r.watchTurn() // a claims, and loses
			r.watchTurn() // b's key comes
			r.tickAt(s)
			return r.ours()
		},
		want: []string{"someone else writes owner.0", "create owner.0: changed"},
	}, {
		name:       "releases what rendezvous gives a member that joins: stopped, then its key deleted",
		partitions: 4,
		script: func(r *rig) []string {
			r.watchTurn()
			r.kv.Steal(memberKey+"b", memberValue("b"))
			r.ours()
			r.watchTurn()
			return r.ours()
		},
		want: func() []string {
			var w []string
			for _, p := range four {
				w = append(w, fmt.Sprintf("stop %d", p), fmt.Sprintf("delete owner.%d", p))
			}
			return w
		}(),
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, "a", c.partitions, c.keys...)
			got := c.script(r)
			r.checkFence("end")
			if !slices.Equal(got, c.want) {
				t.Errorf("trace\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// runLeases runs member a's lease loop, run itself, over kv and its clock,
// until the test ends or cancel; done is closed once run has returned.
func runLeases(t *testing.T, kv *fake.KV, partitions int, ttl time.Duration) (l *Loop, hand *recHand, cancel func(), done chan struct{}) {
	t.Helper()
	hand = newRecHand(kv.Trace())
	l = New(kv, Config{Self: Member{Instance: "a"}, Slots: partitions, TTL: ttl, Hand: hand, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	l.clock, l.after = kv.Clock().Now, kv.Clock().AfterFunc
	ctx, cancel := context.WithCancel(t.Context())
	if err := l.Join(ctx); err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l, hand, cancel, done
}

// A watch gap: the watch closes (the connection closed under it) and a
// member joins meanwhile, unseen; the loop watches again, takes in every
// key there is, and gives the newcomer its share. This one runs run
// itself, waiting with wait.For; its lease is long enough that no tick
// comes.
func TestLeaseWatchGap(t *testing.T) {
	const partitions = 8
	kv := fake.NewKV(fake.NewClock(), time.Hour, &fake.Trace{})
	l, hand, cancel, done := runLeases(t, kv, partitions, time.Hour)
	runs := func(want []int) func() error {
		return func() error {
			if got := hand.runs(); !slices.Equal(got, want) {
				return fmt.Errorf("running %v, want %v (watched %d times)", got, want, kv.WatchCalls())
			}
			return nil
		}
	}
	all := make([]int, partitions)
	for p := range all {
		all[p] = p
	}
	wait.For(t, 10*time.Second, runs(all))

	kv.Missed(memberKey+"b", memberValue("b"))
	kv.BreakWatches()
	var mine []int
	for p := range partitions {
		if OwnerOf(p, []string{"a", "b"}) == "a" {
			mine = append(mine, p)
		}
	}
	wait.For(t, 10*time.Second, runs(mine))
	if n := kv.WatchCalls(); n != 2 {
		t.Errorf("watched %d times, want 2", n)
	}
	if _, ok := l.Table().Members["b"]; !ok {
		t.Errorf("members after the gap: %v, want b among them", l.Table().Members)
	}

	// Leaving releases the rest and deletes the member key.
	cancel()
	<-done
	for p := range partitions {
		if e, _, ok := kv.Key(ownerKey + strconv.Itoa(p)); ok {
			t.Errorf("partition %d's key after a left: %s", p, e.Data)
		}
	}
	if _, _, ok := kv.Key(memberKey + "a"); ok {
		t.Error("a's member key is there after it left")
	}
}

// A ghost: a member's key goes (it died) and no watch says so (a gap
// longer than the expiry markers live). The loop reads the bucket again
// every lease, so the ghost's share comes back to the living. The fake
// clock stands still: only the loop's ticker runs, every ttl/4.
func TestLeaseGhost(t *testing.T) {
	const partitions = 8
	kv := fake.NewKV(fake.NewClock(), time.Hour, &fake.Trace{})
	kv.Steal(memberKey+"b", memberValue("b"))
	l, hand, _, _ := runLeases(t, kv, partitions, 200*time.Millisecond)
	var mine, all []int
	for p := range partitions {
		if OwnerOf(p, []string{"a", "b"}) == "a" {
			mine = append(mine, p)
		}
		all = append(all, p)
	}
	runs := func(want []int) func() error {
		return func() error {
			if got := hand.runs(); !slices.Equal(got, want) {
				return fmt.Errorf("running %v, want %v (watched %d times, members %v)", got, want, kv.WatchCalls(), slices.Sorted(maps.Keys(l.Table().Members)))
			}
			return nil
		}
	}
	wait.For(t, 10*time.Second, runs(mine))
	kv.Missed(memberKey+"b", nil)
	wait.For(t, 10*time.Second, runs(all))
	if _, ok := l.Table().Members["b"]; ok {
		t.Error("b is still a member")
	}
}

// A member whose key runs out within a lease of one of our writes failing
// (the bucket away: a NATS node lost, its leader being elected) is counted
// live a lease longer, so that it can claim its own partitions back, and
// resume them, rather than have us claim and rebuild them; one whose key
// runs out while our writes go through is taken over at once.
func TestLeaseVanishedWhileBucketAway(t *testing.T) {
	s := time.Second
	var bs []int // b's partitions among a and b
	for p := range 4 {
		if OwnerOf(p, []string{"a", "b"}) == "b" {
			bs = append(bs, p)
		}
	}
	for _, c := range []struct {
		name    string
		away    bool          // our member key's writes fail until 4 s
		claimed time.Duration // when we claim b's partitions
	}{
		{name: "bucket answering", claimed: fenceTTL},
		{name: "bucket away", away: true, claimed: 2 * fenceTTL},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys := [][2]string{{memberKey + "b", string(memberValue("b"))}}
			for _, p := range bs {
				keys = append(keys, [2]string{ownerKey + strconv.Itoa(p), string(ownerValue("b", true))})
			}
			r := newRig(t, "a", 4, keys...)
			r.watchTurn()
			if c.away {
				r.kv.SetFault(func(op, key string) error {
					if key == memberKey+"a" {
						return fake.ErrTimeout
					}
					return nil
				})
			}
			for at := s; at <= 2*fenceTTL; at += s { // b never writes again: its keys run out at 4 s
				if at > fenceTTL {
					r.kv.SetFault(nil)
				}
				r.tickAt(at)
				for _, p := range bs {
					if _, running := r.hand.claim(p); running != (at >= c.claimed) {
						t.Fatalf("at %v: runs b's partition %d: %v, want it claimed at %v", at, p, running, c.claimed)
					}
				}
				r.checkFence(fmt.Sprint("tick at ", at))
			}
		})
	}
}

// recHand is a hand that records what the loop has it do.
type recHand struct {
	trace *fake.Trace

	mu      sync.Mutex
	running map[int]uint64 // partition -> claim it was started with
}

func newRecHand(tr *fake.Trace) *recHand { return &recHand{trace: tr, running: map[int]uint64{}} }

func (h *recHand) Start(p int, claim uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.running[p]; ok {
		panic("partition " + strconv.Itoa(p) + " started twice")
	}
	h.running[p] = claim
	h.trace.Add("start %d", p)
}

func (h *recHand) Stop(p int, claim uint64, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.running[p]; !ok || c != claim {
		return // stopped already, by the other of the loop and the timer
	}
	delete(h.running, p)
	h.trace.Add("stop %d", p)
}

// claim is the claim partition p runs by, if it runs.
func (h *recHand) claim(p int) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.running[p]
	return c, ok
}

// runs is the partitions running, in order.
func (h *recHand) runs() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ps []int
	for p := range h.running {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}
