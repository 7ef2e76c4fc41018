// Package fake holds the fakes the group's tests run on: a clock that
// moves only when told to, a key-value bucket in memory with JetStream's
// rules on that clock, and a trace of what happened, in order. Tests
// only: nothing else imports it.
package fake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/bus"
)

// T0 is when the fake clock starts.
var T0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// Clock is a clock that moves only when told to, and its timers,
// which fire, in order, on the goroutine that moves it past them.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*timer
}

type timer struct {
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func NewClock() *Clock { return &Clock{t: T0} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d: what a write that hangs for d does.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	c.fire()
}

// At moves the clock to T0+d, unless it is there already.
func (c *Clock) At(d time.Duration) {
	c.mu.Lock()
	if t := T0.Add(d); t.After(c.t) {
		c.t = t
	}
	c.mu.Unlock()
	c.fire()
}

// AfterFunc is time.AfterFunc on the clock: f is called once the clock
// has moved d on, unless stop is called first.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{at: c.t.Add(d), f: f}
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
func (c *Clock) fire() {
	for {
		c.mu.Lock()
		var next *timer
		for _, tm := range c.timers {
			if !tm.done && !tm.at.After(c.t) && (next == nil || tm.at.Before(next.at)) {
				next = tm
			}
		}
		if next == nil {
			c.timers = slices.DeleteFunc(c.timers, func(tm *timer) bool { return tm.done })
			c.mu.Unlock()
			return
		}
		next.done = true
		c.mu.Unlock()
		next.f()
	}
}

// Trace is what a test saw happen, in order: the fake bucket's writes and
// the fake hand's starts and stops.
type Trace struct {
	mu     sync.Mutex
	events []string
}

func (tr *Trace) Add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, fmt.Sprintf(format, args...))
}

func (tr *Trace) All() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.events)
}

// KV is a bucket (lease.KV, and what a partition's progress is kept in)
// in memory with JetStream's rules: one revision
// counter for the bucket, compare-and-set on a key's newest revision, a
// delete or an expiry leaves a marker that watchers see, and a key
// expires ttl after its last write on the clock. Its fault hook fails
// writes, hangs them (by moving the clock) then fails them, or hangs them
// then lets them through, on demand (SetFault); Steal loses a compare-and-set for us.
//
// A write that goes through is taken to have reached the server when it
// was called, before any hang: the earliest it could, so its key expires
// as early as it could.
type KV struct {
	clock *Clock
	ttl   time.Duration
	trace *Trace

	mu sync.Mutex
	// fault, if set, is called before each write that would go through
	// (op is create, update, put or delete); an error fails it.
	fault   func(op, key string) error
	rev     uint64
	keys    map[string]*entry
	watches []chan *bus.Entry
	watched int // calls of WatchAll
}

type entry struct {
	bus.Entry
	written time.Time // when its last write reached the server
}

// ErrTimeout is what a fault hook returns for a write that timed out.
var ErrTimeout = errors.New("fake kv: timeout")

// NewKV is an empty bucket on clock whose keys expire ttl after their
// last write, tracing its writes to tr.
func NewKV(clock *Clock, ttl time.Duration, tr *Trace) *KV {
	return &KV{clock: clock, ttl: ttl, trace: tr, keys: map[string]*entry{}}
}

// expireLocked replaces the keys whose lease has run out with expiry
// markers, as the server does.
func (k *KV) expireLocked(now time.Time) {
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

func (k *KV) setLocked(key string, value []byte, deleted bool, now time.Time) uint64 {
	k.rev++
	e := &entry{Entry: bus.Entry{Key: key, Value: bus.Value{Data: slices.Clone(value), Revision: k.rev, Deleted: deleted}, Created: now}, written: now}
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
func (k *KV) write(op, key string, value []byte, deleted bool, last int64) (uint64, error) {
	k.mu.Lock()
	now := k.clock.Now()
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
		k.trace.Add("%s %s: %s", op, key, why)
		return 0, err
	}
	k.mu.Lock()
	rev := k.setLocked(key, value, deleted, now)
	k.mu.Unlock()
	k.trace.Add("%s %s", op, key)
	return rev, nil
}

func (k *KV) Create(_ context.Context, key string, value []byte) (uint64, error) {
	return k.write("create", key, value, false, 0)
}

func (k *KV) Update(_ context.Context, key string, value []byte, last uint64) (uint64, error) {
	return k.write("update", key, value, false, int64(last))
}

func (k *KV) Put(_ context.Context, key string, value []byte) (uint64, error) {
	return k.write("put", key, value, false, -1)
}

func (k *KV) Delete(_ context.Context, key string, last uint64) error {
	l := int64(last)
	if last == 0 {
		l = -1
	}
	_, err := k.write("delete", key, nil, true, l)
	return err
}

// Clock is the clock the bucket runs on.
func (k *KV) Clock() *Clock { return k.clock }

// Trace is where the bucket traces its writes.
func (k *KV) Trace() *Trace { return k.trace }

// SetFault sets the hook called before each write that would go through
// (op is create, update, put or delete); an error it returns fails the
// write. nil: none.
func (k *KV) SetFault(f func(op, key string) error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fault = f
}

// Get is the newest version of key; bus.ErrNoKey if there is none.
func (k *KV) Get(_ context.Context, key string) (bus.Value, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(k.clock.Now())
	e, ok := k.keys[key]
	if !ok || e.Deleted {
		return bus.Value{}, fmt.Errorf("fake kv: %s: %w", key, bus.ErrNoKey)
	}
	return e.Value, nil
}

// WatchAll delivers the newest version of every key, in the order they
// were written, then nil, then every change, until ctx is done or
// BreakWatches.
func (k *KV) WatchAll(ctx context.Context) (<-chan *bus.Entry, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(k.clock.Now())
	k.watched++
	w := make(chan *bus.Entry, 4096)
	es := make([]*entry, 0, len(k.keys))
	for _, e := range k.keys {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.Revision, b.Revision) })
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

// BreakWatches closes every watch, as a connection that closes under them
// does.
func (k *KV) BreakWatches() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.watches {
		close(w)
	}
	k.watches = nil
}

// WatchCalls is how many times WatchAll was called.
func (k *KV) WatchCalls() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.watched
}

// Expire replaces the keys whose lease has run out with expiry markers,
// as the server does on its own.
func (k *KV) Expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(k.clock.Now())
}

// Missed writes key (nil: deletes it) as someone else does while our
// watch is broken: no watch sees it.
func (k *KV) Missed(key string, value []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	watches := k.watches
	k.watches = nil
	k.setLocked(key, value, value == nil, k.clock.Now())
	k.watches = watches
	k.trace.Add("someone else writes %s, unwatched", key)
}

// Steal writes key as someone else would (they think it is theirs): our
// next compare-and-set of it loses.
func (k *KV) Steal(key string, value []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.setLocked(key, value, false, k.clock.Now())
	k.trace.Add("someone else writes %s", key)
}

// Key is the newest version of key, and when its lease runs out; ok is
// false if it does not exist.
func (k *KV) Key(key string) (e bus.Entry, expires time.Time, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.keys[key]
	if !ok || f.Deleted {
		return bus.Entry{}, time.Time{}, false
	}
	return f.Entry, f.written.Add(k.ttl), true
}
