package group

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatpulse/chatpulse/bus"
)

// Keys of the leases bucket.
const (
	memberKey = "member." // + instance: a live member
	ownerKey  = "owner."  // + partition: who owns it
)

// memberInfo is the value of a member's key.
type memberInfo struct {
	Instance string `json:"instance"`
	HTTP     string `json:"http"`
	Lag      uint64 `json:"lag"` // messages its partitions have yet to read
}

// ownerInfo is the value of a partition's key.
type ownerInfo struct {
	Instance string `json:"instance"`
	Ready    bool   `json:"ready"` // caught up: it answers for the partition
	rev      uint64
}

// A keyValue is the bucket the leases live in: compare-and-set writes of
// keys that expire ttl after their last write, and a watch of every key.
// bus.Bucket is one over JetStream (openLeases); the tests have one in
// memory. Its entries are bus.Entry because bus cannot name a type of
// ours.
type keyValue interface {
	// Create writes key if it does not exist, and returns its revision;
	// if it exists, the error is bus.ErrKeyChanged.
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	// Update writes key if its revision is still last, and returns the
	// new one; if it is not, the error is bus.ErrKeyChanged.
	Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error)
	// Put writes key whatever its revision.
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	// Delete deletes key if its revision is still last (0: whatever it is).
	Delete(ctx context.Context, key string, last uint64) error
	// WatchAll delivers the newest version of every key, then nil once
	// those have all come, then every change, until ctx is done or the
	// watch breaks: then it closes the channel.
	WatchAll(ctx context.Context) (<-chan *bus.Entry, error)
}

// A hand is what the lease loop does with the partitions it wins and loses:
// start one (it calls ready with the same claim when caught up), stop one
// (synchronously: when stop returns nothing of it is counted or answered
// any more).
type hand interface {
	start(p int, claim uint64)
	stop(p int)
}

// held is a partition this member holds the lease of.
type held struct {
	claim      uint64    // revision of the write that claimed it
	rev        uint64    // revision of our last write of its key
	validUntil time.Time // we answer as its owner until then
	ready      bool      // caught up, and said so in the key
	readyAsked bool      // caught up, not yet said so
}

// table is what the lease loop knows, published for readers as one
// immutable value.
type table struct {
	synced  bool // the loop has seen every key there was when it began
	members map[string]memberInfo
	owners  map[int]ownerInfo
	mine    map[int]time.Time // partitions held, and until when we may answer for them
	wants   []int             // partitions rendezvous gives us
}

// owns reports whether this member may answer for partition p at now.
func (t *table) owns(p int, now time.Time) bool {
	until, ok := t.mine[p]
	return ok && now.Before(until) && t.owners[p].Ready
}

// leases runs membership and ownership: it keeps this member's key alive,
// watches everyone's, computes which partitions should be whose
// (rendezvous), and claims, renews and releases partition leases with
// compare-and-set writes, so that two members never hold one partition.
//
// Fencing: a lease key lives ttl after its last write (the bucket's
// MaxAge), and we rewrite it every ttl/4. We count our ownership valid for
// ttl/2 from when we sent the last write that succeeded, and a partition
// whose lease we could not renew by then is stopped at the next tick, by
// 3/4 ttl: before the key can expire on the server (ttl after it received
// the write, which was after we sent it) and another member can create it.
//
// Time: leases run on elapsed time, this member's monotonic clock (clock:
// time.Now, whose readings carry it, so stepping the wall clock moves no
// lease; owns is asked with one of its readings), while views and
// throttles run on event time, the events' own timestamps, which never
// move a lease. The loop reads the clock once per tick, after writing our
// member key, to decide which partitions to stop (renew's now), and at the
// send of each partition write, to stamp it (writeOwner's sent): a write
// can take seconds, and each lease counts from its own write's send.
// Tests drive the loop a step at a time (apply, takeReady, tick, settle)
// over a fake bucket and clock.
type leases struct {
	kv         keyValue
	clock      func() time.Time // elapsed time: time.Now; the tests' is a fake
	self       memberInfo
	partitions int
	ttl        time.Duration
	hand       hand
	log        *slog.Logger

	lag     func() uint64         // for the member key; nil: 0
	readyMu sync.Mutex            // guards caught
	caught  map[int]uint64        // partitions that caught up, and their claims, from hand
	readyc  chan struct{}         // something is in caught
	pub     atomic.Pointer[table] // what readers see

	// Owned by run.
	synced  bool // the watch has delivered every key there was
	members map[string]memberInfo
	owners  map[int]ownerInfo
	mine    map[int]*held
}

func newLeases(kv keyValue, self memberInfo, partitions int, ttl time.Duration, h hand, log *slog.Logger) *leases {
	l := &leases{kv: kv, clock: time.Now, self: self, partitions: partitions, ttl: ttl, hand: h, log: log,
		caught: map[int]uint64{}, readyc: make(chan struct{}, 1),
		members: map[string]memberInfo{}, owners: map[int]ownerInfo{}, mine: map[int]*held{}}
	l.publish()
	return l
}

// ready tells the loop that partition p, as claimed by claim, has caught
// up. It never blocks.
func (l *leases) ready(p int, claim uint64) {
	l.readyMu.Lock()
	l.caught[p] = claim
	l.readyMu.Unlock()
	select {
	case l.readyc <- struct{}{}:
	default:
	}
}

// table is the latest published table.
func (l *leases) table() *table { return l.pub.Load() }

// join creates this member's key. A key with our name that is still there
// may be a previous run of ours that died: it is gone within ttl, so we
// wait that long before saying that a live member has the name.
func (l *leases) join(ctx context.Context) error {
	value, _ := json.Marshal(l.self)
	deadline := time.Now().Add(l.ttl + time.Second)
	for {
		_, err := l.kv.Create(ctx, memberKey+l.self.Instance, value)
		if err == nil {
			return nil
		}
		if !errors.Is(err, bus.ErrKeyChanged) {
			return err
		}
		if time.Now().After(deadline) {
			return errDuplicate
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var errDuplicate = errors.New("a live member of the group already has this instance name")

// run keeps the leases until ctx is done, then releases every partition
// it holds and removes its member key.
func (l *leases) run(ctx context.Context) error {
	stop := func() {} // ends the watch
	defer func() { stop() }()
	watch := func() (<-chan *bus.Entry, error) {
		stop()
		var wctx context.Context
		wctx, stop = context.WithCancel(ctx)
		return l.kv.WatchAll(wctx)
	}
	w, err := watch()
	if err != nil {
		return err
	}
	ticker := time.NewTicker(l.ttl / 4)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			l.leave()
			return nil
		case e, ok := <-w:
			if !ok { // the connection closed under the watch, or ctx is done
				if ctx.Err() != nil {
					w = nil // the next turn leaves
					continue
				}
				if w, err = watch(); err != nil {
					l.log.Warn("group: cannot watch the leases", "err", err)
					w = nil // nothing comes any more, while we run out our leases
				}
				continue
			}
			l.apply(e)
			// Take in everything the watch has before acting on it.
			for more := true; more; {
				select {
				case e, ok := <-w:
					if ok {
						l.apply(e)
					}
					more = ok
				default:
					more = false
				}
			}
		case <-l.readyc:
			l.takeReady()
		case <-ticker.C:
			l.tick(ctx)
		}
		l.settle(ctx)
	}
}

// settle acts on what the loop knows after each event, and publishes it.
func (l *leases) settle(ctx context.Context) {
	if l.synced { // until then the members we know are not all there are
		l.balance(ctx)
	}
	l.publish()
}

// takeReady marks the partitions hand said caught up, if we still hold
// them by the claim that caught up, to be said so in their keys.
func (l *leases) takeReady() {
	l.readyMu.Lock()
	for p, claim := range l.caught {
		if h := l.mine[p]; h != nil && h.claim == claim {
			h.readyAsked = true
		}
	}
	clear(l.caught)
	l.readyMu.Unlock()
}

// apply takes one change of the bucket into the loop's maps; nil marks
// the end of the keys that were there when the watch began.
func (l *leases) apply(e *bus.Entry) {
	if e == nil {
		l.synced = true
		return
	}
	gone := e.Deleted
	switch key := e.Key; {
	case strings.HasPrefix(key, memberKey):
		name := key[len(memberKey):]
		var m memberInfo
		if gone || json.Unmarshal(e.Data, &m) != nil {
			delete(l.members, name)
			return
		}
		l.members[name] = m
	case strings.HasPrefix(key, ownerKey):
		p, err := strconv.Atoi(key[len(ownerKey):])
		if err != nil {
			return
		}
		var o ownerInfo
		if gone || json.Unmarshal(e.Data, &o) != nil {
			delete(l.owners, p)
			return
		}
		o.rev = e.Revision
		l.owners[p] = o
	}
}

// tick rewrites our keys, every ttl/4: the member key, then the
// partitions' keys, deciding which partitions to stop by the clock read
// after the member key's write.
func (l *leases) tick(ctx context.Context) {
	l.beat(ctx)
	l.renew(ctx, l.clock())
}

// beat rewrites our member key.
func (l *leases) beat(ctx context.Context) {
	if l.lag != nil {
		l.self.Lag = l.lag()
	}
	value, _ := json.Marshal(l.self)
	if _, err := l.kv.Put(ctx, memberKey+l.self.Instance, value); err != nil {
		l.log.Warn("group: member key not renewed", "err", err)
	}
}

// renew rewrites the keys of the partitions we hold. A partition whose key
// was changed by someone else is lost: stopped at once; so is one we could
// not renew whose lease had run out by now.
func (l *leases) renew(ctx context.Context, now time.Time) {
	for p, h := range l.mine {
		rev, sent, err := l.writeOwner(ctx, p, h.readyAsked, h.rev)
		switch {
		case err == nil:
			h.rev, h.validUntil, h.ready = rev, l.until(sent), h.readyAsked
		case errors.Is(err, bus.ErrKeyChanged) || now.After(h.validUntil):
			l.log.Warn("group: lost partition", "partition", p, "err", err)
			l.drop(p)
		default:
			l.log.Warn("group: partition lease not renewed", "partition", p, "err", err)
		}
	}
}

// writeOwner writes partition p's key as ours, if its revision is still
// rev (0: if it does not exist), and returns the new revision and when
// the write was sent.
func (l *leases) writeOwner(ctx context.Context, p int, ready bool, rev uint64) (uint64, time.Time, error) {
	sent := l.clock()
	value, _ := json.Marshal(ownerInfo{Instance: l.self.Instance, Ready: ready})
	key := ownerKey + strconv.Itoa(p)
	var err error
	if rev == 0 {
		rev, err = l.kv.Create(ctx, key, value)
	} else {
		rev, err = l.kv.Update(ctx, key, value, rev)
	}
	return rev, sent, err
}

// balance releases the partitions that should now be another member's and
// claims those that should be ours and are free.
func (l *leases) balance(ctx context.Context) {
	for p := range l.partitions {
		want := l.wants(p)
		h := l.mine[p]
		switch {
		case h != nil && !want:
			l.release(ctx, p)
		case h == nil && want:
			if _, taken := l.owners[p]; taken {
				continue // its holder releases it, or its lease runs out
			}
			rev, sent, err := l.writeOwner(ctx, p, false, 0)
			if err != nil {
				continue // someone was quicker; the watch will say who
			}
			l.mine[p] = &held{claim: rev, rev: rev, validUntil: l.until(sent)}
			l.owners[p] = ownerInfo{Instance: l.self.Instance, rev: rev}
			l.log.Info("group: partition claimed", "partition", p)
			l.hand.start(p, rev)
		case h != nil && h.readyAsked && !h.ready:
			if rev, sent, err := l.writeOwner(ctx, p, true, h.rev); err == nil {
				h.rev, h.validUntil, h.ready = rev, l.until(sent), true
				l.owners[p] = ownerInfo{Instance: l.self.Instance, Ready: true, rev: rev}
			}
		}
	}
}

// until is how long a lease written at sent lets us answer as owner.
func (l *leases) until(sent time.Time) time.Time { return sent.Add(l.ttl / 2) }

// wants reports whether rendezvous hashing gives partition p to this
// member, among the members the loop knows to be live.
func (l *leases) wants(p int) bool {
	live := make([]string, 0, len(l.members)+1)
	for name := range l.members {
		live = append(live, name)
	}
	if !slices.Contains(live, l.self.Instance) {
		live = append(live, l.self.Instance) // we are live whatever the watch has seen yet
	}
	return owner(p, live) == l.self.Instance
}

// release stops partition p and gives up its lease.
func (l *leases) release(ctx context.Context, p int) {
	rev := l.mine[p].rev
	l.drop(p)
	if err := l.kv.Delete(ctx, ownerKey+strconv.Itoa(p), rev); err != nil {
		l.log.Warn("group: partition not released (its lease runs out instead)", "partition", p, "err", err)
	}
	l.log.Info("group: partition released", "partition", p)
}

// drop stops partition p and forgets that we hold it, and says so to
// readers at once: before anyone can learn that the lease is free.
func (l *leases) drop(p int) {
	l.hand.stop(p)
	delete(l.mine, p)
	delete(l.owners, p)
	l.publish()
}

// leave releases everything and removes our member key, so that the
// others take over at once rather than after the lease.
func (l *leases) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for p := range l.mine {
		l.release(ctx, p)
	}
	l.kv.Delete(ctx, memberKey+l.self.Instance, 0)
	l.publish()
}

// publish makes the loop's state visible to readers.
func (l *leases) publish() {
	t := &table{synced: l.synced, members: maps.Clone(l.members), owners: maps.Clone(l.owners), mine: make(map[int]time.Time, len(l.mine))}
	for p, h := range l.mine {
		t.mine[p] = h.validUntil
	}
	for p := range l.partitions {
		if l.wants(p) {
			t.wants = append(t.wants, p)
		}
	}
	l.pub.Store(t)
}
