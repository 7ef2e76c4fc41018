package group

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/bus"
)

// t0 is when the fake clock starts.
var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock that moves only when told to, and its timers,
// which fire, in order, on the goroutine that moves it past them.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// advance moves the clock on by d: what a write that hangs for d does.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	c.fire()
}

// at moves the clock to t0+d, unless it is there already.
func (c *fakeClock) at(d time.Duration) {
	c.mu.Lock()
	if t := t0.Add(d); t.After(c.t) {
		c.t = t
	}
	c.mu.Unlock()
	c.fire()
}

// afterFunc is time.AfterFunc on the clock: f is called once the clock
// has moved d on, unless stop is called first.
func (c *fakeClock) afterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{at: c.t.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.done
		tm.done = true
		return was
	}
}

// fire calls the timers that are due, earliest first, outside the lock.
func (c *fakeClock) fire() {
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, tm := range c.timers {
			if !tm.done && !tm.at.After(c.t) && (next == nil || tm.at.Before(next.at)) {
				next = tm
			}
		}
		if next == nil {
			c.timers = slices.DeleteFunc(c.timers, func(tm *fakeTimer) bool { return tm.done })
			c.mu.Unlock()
			return
		}
		next.done = true
		c.mu.Unlock()
		next.f()
	}
}

// trace is what a test saw happen, in order: the fake bucket's writes and
// the fake hand's starts and stops.
type trace struct {
	mu     sync.Mutex
	events []string
}

func (tr *trace) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, fmt.Sprintf(format, args...))
}

func (tr *trace) all() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.events)
}

// fakeKV is a keyValue in memory with JetStream's rules: one revision
// counter for the bucket, compare-and-set on a key's newest revision, a
// delete or an expiry leaves a marker that watchers see, and a key
// expires ttl after its last write on the clock. Its fault hook fails
// writes, hangs them (by moving the clock) then fails them, or hangs them
// then lets them through, on demand; steal loses a compare-and-set for us.
//
// A write that goes through is taken to have reached the server when it
// was called, before any hang: the earliest it could, so its key expires
// as early as it could.
type fakeKV struct {
	clock *fakeClock
	ttl   time.Duration
	trace *trace

	mu sync.Mutex
	// fault, if set, is called before each write that would go through
	// (op is create, update, put or delete); an error fails it.
	fault   func(op, key string) error
	rev     uint64
	keys    map[string]*fakeKey
	watches []chan *bus.Entry
	watched int // calls of WatchAll
}

type fakeKey struct {
	bus.Entry
	written time.Time // when its last write reached the server
}

var errFakeTimeout = errors.New("fake kv: timeout")

func newFakeKV(clock *fakeClock, ttl time.Duration, tr *trace) *fakeKV {
	return &fakeKV{clock: clock, ttl: ttl, trace: tr, keys: map[string]*fakeKey{}}
}

// expireLocked replaces the keys whose lease has run out with expiry
// markers, as the server does.
func (k *fakeKV) expireLocked(now time.Time) {
	var gone []string
	for key, e := range k.keys {
		if !e.Deleted && !now.Before(e.written.Add(k.ttl)) {
			gone = append(gone, key)
		}
	}
	slices.Sort(gone)
	for _, key := range gone {
		k.setLocked(key, nil, true, now)
	}
}

func (k *fakeKV) setLocked(key string, value []byte, deleted bool, now time.Time) uint64 {
	k.rev++
	e := &fakeKey{Entry: bus.Entry{Key: key, Value: bus.Value{Data: slices.Clone(value), Revision: k.rev, Deleted: deleted}, Created: now}, written: now}
	k.keys[key] = e
	for _, w := range k.watches {
		select {
		case w <- &e.Entry:
		default:
			panic("fake kv: a watch is full")
		}
	}
	return k.rev
}

// write is every write: expire what ran out, check the revision, ask
// the fault hook, write. last < 0: whatever the revision.
func (k *fakeKV) write(op, key string, value []byte, deleted bool, last int64) (uint64, error) {
	k.mu.Lock()
	now := k.clock.now()
	k.expireLocked(now)
	cur, ok := k.keys[key]
	changed := last == 0 && ok && !cur.Deleted || last > 0 && (!ok || cur.Revision != uint64(last))
	fault := k.fault
	k.mu.Unlock()
	var err error
	switch {
	case changed:
		err = fmt.Errorf("fake kv: %s %s: %w", op, key, bus.ErrKeyChanged)
	case fault != nil:
		err = fault(op, key)
	}
	if err != nil {
		why := "failed"
		if errors.Is(err, bus.ErrKeyChanged) {
			why = "changed"
		}
		k.trace.add("%s %s: %s", op, key, why)
		return 0, err
	}
	k.mu.Lock()
	rev := k.setLocked(key, value, deleted, now)
	k.mu.Unlock()
	k.trace.add("%s %s", op, key)
	return rev, nil
}

func (k *fakeKV) Create(_ context.Context, key string, value []byte) (uint64, error) {
	return k.write("create", key, value, false, 0)
}

func (k *fakeKV) Update(_ context.Context, key string, value []byte, last uint64) (uint64, error) {
	return k.write("update", key, value, false, int64(last))
}

func (k *fakeKV) Put(_ context.Context, key string, value []byte) (uint64, error) {
	return k.write("put", key, value, false, -1)
}

func (k *fakeKV) Delete(_ context.Context, key string, last uint64) error {
	l := int64(last)
	if last == 0 {
		l = -1
	}
	_, err := k.write("delete", key, nil, true, l)
	return err
}

// WatchAll delivers the newest version of every key, in the order they
// were written, then nil, then every change, until ctx is done or
// breakWatches.
func (k *fakeKV) WatchAll(ctx context.Context) (<-chan *bus.Entry, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(k.clock.now())
	k.watched++
	w := make(chan *bus.Entry, 4096)
	es := make([]*fakeKey, 0, len(k.keys))
	for _, e := range k.keys {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *fakeKey) int { return cmp.Compare(a.Revision, b.Revision) })
	for _, e := range es {
		w <- &e.Entry
	}
	w <- nil
	k.watches = append(k.watches, w)
	context.AfterFunc(ctx, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if i := slices.Index(k.watches, w); i >= 0 {
			k.watches = slices.Delete(k.watches, i, i+1)
			close(w)
		}
	})
	return w, nil
}

// breakWatches closes every watch, as a connection that closes under them
// does.
func (k *fakeKV) breakWatches() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.watches {
		close(w)
	}
	k.watches = nil
}

// watchCalls is how many times WatchAll was called.
func (k *fakeKV) watchCalls() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.watched
}

// expire replaces the keys whose lease has run out with expiry markers,
// as the server does on its own.
func (k *fakeKV) expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(k.clock.now())
}

// missed writes key (nil: deletes it) as someone else does while our
// watch is broken: no watch sees it.
func (k *fakeKV) missed(key string, value []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	watches := k.watches
	k.watches = nil
	k.setLocked(key, value, value == nil, k.clock.now())
	k.watches = watches
	k.trace.add("someone else writes %s, unwatched", key)
}

// steal writes key as someone else would (they think it is theirs): our
// next compare-and-set of it loses.
func (k *fakeKV) steal(key string, value []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.setLocked(key, value, false, k.clock.now())
	k.trace.add("someone else writes %s", key)
}

// key is the newest version of key, and when its lease runs out; ok is
// false if it does not exist.
func (k *fakeKV) key(key string) (e bus.Entry, expires time.Time, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.keys[key]
	if !ok || f.Deleted {
		return bus.Entry{}, time.Time{}, false
	}
	return f.Entry, f.written.Add(k.ttl), true
}

// recHand is a hand that records what the loop has it do.
type recHand struct {
	trace *trace

	mu      sync.Mutex
	running map[int]uint64 // partition -> claim it was started with
}

func newRecHand(tr *trace) *recHand { return &recHand{trace: tr, running: map[int]uint64{}} }

func (h *recHand) start(p int, claim uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.running[p]; ok {
		panic("partition " + strconv.Itoa(p) + " started twice")
	}
	h.running[p] = claim
	h.trace.add("start %d", p)
}

func (h *recHand) stop(p int, claim uint64, _ bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.running[p]; !ok || c != claim {
		return // stopped already, by the other of the loop and the timer
	}
	delete(h.running, p)
	h.trace.add("stop %d", p)
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
