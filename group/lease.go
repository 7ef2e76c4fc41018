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
	Lag      uint64 `json:"lag"`             // messages its partitions have yet to read
	Clock    int64  `json:"clock,omitempty"` // its event clock when it sent the write, Unix ms (0: not said)
	// offset is Clock less the server's clock when it stored the write
	// (Entry.Created): how far ahead of the server's clock the member's
	// is, give or take the write's trip; valid if Clock is set.
	offset int64
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
// (synchronously: when stop returns nothing of it is counted, answered or
// acted on any more). stop is called by the loop and by a partition's
// validity timer, maybe at once and more than once for one claim: it stops
// the partition only if it runs by that claim. lost says the lease was
// lost (it ran out, or the bucket lost it) rather than given up: the
// partition may well come back to this member, so hand may keep its state
// (Member parks it) to resume from instead of rebuilding it.
type hand interface {
	start(p int, claim uint64)
	stop(p int, claim uint64, lost bool)
}

// held is a partition this member holds the lease of.
type held struct {
	claim      uint64      // revision of the write that claimed it
	rev        uint64      // revision of our last write of its key
	validUntil time.Time   // we answer as its owner until then
	ready      bool        // caught up, and said so in the key
	readyAsked bool        // caught up, not yet said so
	expiry     func() bool // stops the validity timer (true: before it fired)
}

// A grant is a partition this member holds, as readers see it: by which
// claim, and until when it may answer and act for it.
type grant struct {
	claim uint64
	until time.Time
}

// table is what the lease loop knows, published for readers as one
// immutable value.
type table struct {
	synced  bool // the loop has seen every key there was when it began
	members map[string]memberInfo
	owners  map[int]ownerInfo
	mine    map[int]grant // partitions held
	wants   []int         // partitions rendezvous gives us
	failed  time.Time     // when a write of ours to the bucket last failed (zero: never)
}

// owns reports whether this member may answer for partition p at now.
func (t *table) owns(p int, now time.Time) bool {
	return t.valid(p, t.mine[p].claim, now) && t.owners[p].Ready
}

// valid reports whether this member holds partition p by claim at now,
// caught up or not: whether it may act for it (alerts, dead letters,
// progress).
func (t *table) valid(p int, claim uint64, now time.Time) bool {
	g, ok := t.mine[p]
	return ok && g.claim == claim && now.Before(g.until)
}

// leases runs membership and ownership: it keeps this member's key alive,
// watches everyone's, computes which partitions should be whose
// (rendezvous), and claims, renews and releases partition leases with
// compare-and-set writes, so that two members never hold one partition.
//
// Fencing: a lease key lives ttl after its last write (the bucket's
// MaxAge), and we rewrite it every ttl/4. We count our ownership valid for
// 3/4 ttl from when we sent the last write that succeeded (so one renewal
// that fails or comes late costs nothing), and a partition
// whose lease we could not renew by then is stopped by a timer at that
// moment, whatever the loop is doing: before the key can expire on the
// server (ttl after it received the write, which was after we sent it) and
// another member can create it. Every write has a deadline of ttl/4
// (writeTimeout; one for all of a tick's renewals), so a bucket that does
// not answer holds the loop up for no more than that: it drops what it
// could not renew by the next tick. A renewal that comes back after the
// validity it extends has run out does not bring the partition back.
//
// Ghosts: the loop's members and owners are what a watch of the bucket
// has said. A watch can miss an expiry (a gap longer than the bucket's
// expiry markers live), so the loop watches again every ttl, and whenever
// a watch breaks (a reconnect) or cannot be made (tried again each tick):
// each new watch's keys replace what the loop knew, once they have all
// come.
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

	// after calls f after d of the clock, unless the returned stop is
	// called first: time.AfterFunc; the tests' runs on their clock.
	after func(d time.Duration, f func()) (stop func() bool)

	lag     func() uint64         // for the member key; nil: 0
	stamp   func() time.Time      // the event clock, for the member key; nil: not said
	maxSkew time.Duration         // a member whose clock is further from the group's is logged; 0: none
	skewed  map[string]int64      // owned by run: the members logged as skewed, by offset from the group's
	notesMu sync.Mutex            // guards caught and expired
	caught  map[int]uint64        // partitions that caught up, and their claims, from hand
	expired map[int]uint64        // partitions whose validity timer fired, and their claims
	notes   chan struct{}         // something is in caught or expired
	pub     atomic.Pointer[table] // what readers see

	// Owned by run.
	synced  bool // the watch has delivered every key there was
	members map[string]memberInfo
	owners  map[int]ownerInfo
	mine    map[int]*held
	// A new watch's keys, until they have all come and replace members
	// and owners; nil while no new watch is being read.
	nextMembers map[string]memberInfo
	nextOwners  map[int]ownerInfo
	// failed is when a write of ours last failed for want of the bucket
	// (not for a compare-and-set); vanished, the members whose keys went
	// while or soon after ours could not be written, and when: they are
	// counted live a lease longer (wants).
	failed   time.Time
	vanished map[string]time.Time
}

func newLeases(kv keyValue, self memberInfo, partitions int, ttl time.Duration, h hand, log *slog.Logger) *leases {
	l := &leases{kv: kv, clock: time.Now, after: afterFunc, self: self, partitions: partitions, ttl: ttl, hand: h, log: log,
		caught: map[int]uint64{}, expired: map[int]uint64{}, notes: make(chan struct{}, 1),
		members: map[string]memberInfo{}, owners: map[int]ownerInfo{}, mine: map[int]*held{}, vanished: map[string]time.Time{}}
	l.publish()
	return l
}

func afterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// writeTimeout is the deadline of each write to the bucket, and of all of
// a tick's renewals together: a write that has not come back by then
// counts as failed (and, if it got through after all, it only extends a
// lease the next tick renews or lets run out).
func (l *leases) writeTimeout() time.Duration { return l.ttl / 4 }

// ready tells the loop that partition p, as claimed by claim, has caught
// up. It never blocks.
func (l *leases) ready(p int, claim uint64) {
	l.notesMu.Lock()
	l.caught[p] = claim
	l.notesMu.Unlock()
	l.wake()
}

// expire is partition p's validity timer, for claim (and its fence, when
// it finds the validity over first): it stops the partition at once, then
// tells the loop, which may be stuck in a write.
func (l *leases) expire(p int, claim uint64) {
	l.hand.stop(p, claim, true)
	l.notesMu.Lock()
	l.expired[p] = claim
	l.notesMu.Unlock()
	l.wake()
}

func (l *leases) wake() {
	select {
	case l.notes <- struct{}{}:
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
	var w <-chan *bus.Entry
	watch := func() {
		stop()
		var wctx context.Context
		wctx, stop = context.WithCancel(ctx)
		var err error
		if w, err = l.kv.WatchAll(wctx); err != nil {
			l.log.Warn("group: cannot watch the leases; trying again at the next tick", "err", err)
			l.failed = l.clock() // the bucket is away as much as when a write fails
			w = nil
			return
		}
		l.nextMembers, l.nextOwners = map[string]memberInfo{}, map[int]ownerInfo{}
	}
	watch()
	if w == nil && !l.synced {
		return errors.New("group: cannot watch the leases")
	}
	ticker := time.NewTicker(l.ttl / 4)
	defer ticker.Stop()
	ticks := 0
	for {
		select {
		case <-ctx.Done():
			l.leave()
			return nil
		case e, ok := <-w:
			if !ok { // the connection closed under the watch, or ctx is done
				if ctx.Err() == nil {
					watch()
				} else {
					w = nil // the next turn leaves
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
		case <-l.notes:
			l.takeNotes(ctx)
		case <-ticker.C:
			l.tick(ctx)
			if ticks++; w == nil || ticks%4 == 0 { // every ttl, the bucket again from scratch
				watch()
			}
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

// takeNotes marks the partitions hand said caught up, if we still hold
// them by the claim that caught up, to be said so in their keys; and
// releases those whose validity timer stopped them (their keys may still
// be ours: deleting them lets the rightful owner, maybe us, claim them
// without waiting for them to expire).
func (l *leases) takeNotes(ctx context.Context) {
	l.notesMu.Lock()
	var expired []int
	for p, claim := range l.caught {
		if h := l.mine[p]; h != nil && h.claim == claim {
			h.readyAsked = true
		}
	}
	for p, claim := range l.expired {
		if h := l.mine[p]; h != nil && h.claim == claim {
			expired = append(expired, p)
		}
	}
	clear(l.caught)
	clear(l.expired)
	l.notesMu.Unlock()
	for _, p := range expired {
		l.log.Warn("group: partition lease ran out before it was renewed", "partition", p)
		l.release(ctx, p, true)
	}
}

// apply takes one change of the bucket into the loop's maps; nil marks
// the end of the keys that were there when the watch began. A new watch's
// keys go to the next maps, which replace the loop's at its nil.
func (l *leases) apply(e *bus.Entry) {
	members, owners := l.members, l.owners
	if l.nextMembers != nil {
		members, owners = l.nextMembers, l.nextOwners
	}
	if e == nil {
		if l.nextMembers != nil {
			for name := range l.members {
				if _, still := l.nextMembers[name]; !still {
					l.vanish(name)
				}
			}
			l.members, l.owners = l.nextMembers, l.nextOwners
			l.nextMembers, l.nextOwners = nil, nil
		}
		l.synced = true
		return
	}
	gone := e.Deleted
	switch key := e.Key; {
	case strings.HasPrefix(key, memberKey):
		name := key[len(memberKey):]
		var m memberInfo
		if gone || json.Unmarshal(e.Data, &m) != nil {
			if _, was := members[name]; was && l.nextMembers == nil {
				l.vanish(name)
			}
			delete(members, name)
			return
		}
		delete(l.vanished, name)
		if m.Clock != 0 && !e.Created.IsZero() {
			m.offset = m.Clock - e.Created.UnixMilli()
		}
		members[name] = m
	case strings.HasPrefix(key, ownerKey):
		p, err := strconv.Atoi(key[len(ownerKey):])
		if err != nil {
			return
		}
		var o ownerInfo
		if gone || json.Unmarshal(e.Data, &o) != nil {
			delete(owners, p)
			return
		}
		o.rev = e.Revision
		owners[p] = o
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
	if l.stamp != nil {
		l.self.Clock = l.stamp().UnixMilli()
	}
	value, _ := json.Marshal(l.self)
	ctx, cancel := context.WithTimeout(ctx, l.writeTimeout())
	defer cancel()
	if _, err := l.kv.Put(ctx, memberKey+l.self.Instance, value); err != nil {
		l.log.Warn("group: member key not renewed", "err", err)
		l.failed = l.clock()
	}
}

// renew rewrites the keys of the partitions we hold, all at once, within
// one writeTimeout: one slow write holds up none of the others. A
// partition whose key was changed by someone else is lost: stopped at
// once; so is one we could not renew whose lease had run out by now, and
// one whose renewal came back after its lease ran out.
func (l *leases) renew(ctx context.Context, now time.Time) {
	wctx, cancel := context.WithTimeout(ctx, l.writeTimeout())
	defer cancel()
	type renewal struct {
		p    int
		rev  uint64
		sent time.Time
		err  error
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		done []renewal
	)
	for p, h := range l.mine {
		ready, last := h.readyAsked, h.rev
		wg.Go(func() {
			rev, sent, err := l.writeOwner(wctx, p, ready, last)
			mu.Lock()
			done = append(done, renewal{p, rev, sent, err})
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(done, func(a, b renewal) int { return a.p - b.p })
	back := l.clock()
	for _, r := range done {
		p, h := r.p, l.mine[r.p]
		switch err := r.err; {
		case err == nil && back.Before(h.validUntil):
			h.rev, h.ready = r.rev, h.readyAsked
			l.extend(p, h, r.sent)
		case err == nil:
			l.log.Warn("group: lost partition: renewed after its lease ran out", "partition", p)
			h.rev = r.rev
			l.release(ctx, p, true)
		case errors.Is(err, bus.ErrKeyChanged) || now.After(h.validUntil):
			l.log.Warn("group: lost partition", "partition", p, "err", err)
			if !errors.Is(err, bus.ErrKeyChanged) {
				l.failed = back
			}
			l.drop(p, true)
		default:
			l.log.Warn("group: partition lease not renewed", "partition", p, "err", err)
			l.failed = back
		}
	}
	l.publish() // before the validity readers know runs out
}

// extend makes partition p valid for a lease from sent, and sets its
// validity timer to stop it then.
func (l *leases) extend(p int, h *held, sent time.Time) {
	h.validUntil = l.until(sent)
	if h.expiry != nil {
		h.expiry()
	}
	claim := h.claim
	h.expiry = l.after(h.validUntil.Sub(l.clock()), func() { l.expire(p, claim) })
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
// claims those that should be ours and are free. Once a claim finds the
// bucket not answering, it claims no more this turn: each would hold the
// loop up for a write's deadline.
func (l *leases) balance(ctx context.Context) {
	away := false
	for p := range l.partitions {
		want := l.wants(p)
		h := l.mine[p]
		switch {
		case h != nil && !want:
			l.release(ctx, p, false)
		case h == nil && want:
			if _, taken := l.owners[p]; taken || away {
				continue // its holder releases it, or its lease runs out
			}
			rev, sent, err := l.write(ctx, p, false, 0)
			switch {
			case err == nil:
			case errors.Is(err, bus.ErrKeyChanged): // someone was quicker: the watch will say who
				l.log.Debug("group: partition claimed by another first", "partition", p)
				continue
			case ctx.Err() != nil: // leaving
				continue
			default: // tried again at the next turn
				l.log.Warn("group: partition not claimed", "partition", p, "err", err)
				l.failed, away = l.clock(), true
				continue
			}
			h = &held{claim: rev, rev: rev}
			l.mine[p] = h
			l.extend(p, h, sent)
			l.owners[p] = ownerInfo{Instance: l.self.Instance, rev: rev}
			l.log.Info("group: partition claimed", "partition", p)
			l.publish() // the partition acts only while readers see it held
			l.hand.start(p, rev)
		case h != nil && h.readyAsked && !h.ready:
			rev, sent, err := l.write(ctx, p, true, h.rev)
			switch {
			case err == nil && l.clock().Before(h.validUntil):
				h.rev, h.ready = rev, true
				l.extend(p, h, sent)
				l.owners[p] = ownerInfo{Instance: l.self.Instance, Ready: true, rev: rev}
			case err == nil || errors.Is(err, bus.ErrKeyChanged):
				l.log.Warn("group: lost partition", "partition", p, "err", err)
				h.rev = rev
				l.release(ctx, p, true)
			default: // said again at the next turn, or at the next renewal
				l.log.Warn("group: partition not said to be ready", "partition", p, "err", err)
			}
		}
	}
}

// write is writeOwner on its own, within writeTimeout.
func (l *leases) write(ctx context.Context, p int, ready bool, rev uint64) (uint64, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, l.writeTimeout())
	defer cancel()
	return l.writeOwner(ctx, p, ready, rev)
}

// until is how long a lease written at sent lets us answer as owner.
func (l *leases) until(sent time.Time) time.Time { return sent.Add(l.ttl * 3 / 4) }

// wants reports whether rendezvous hashing gives partition p to this
// member, among the members the loop knows to be live.
func (l *leases) wants(p int) bool {
	live := make([]string, 0, len(l.members)+len(l.vanished)+1)
	for name := range l.members {
		live = append(live, name)
	}
	now := l.clock()
	for name, at := range l.vanished {
		if now.Sub(at) < l.ttl {
			live = append(live, name)
		}
	}
	if !slices.Contains(live, l.self.Instance) {
		live = append(live, l.self.Instance) // we are live whatever the watch has seen yet
	}
	return owner(p, live) == l.self.Instance
}

// vanish notes that member name's key is gone. If that is within a lease
// of a write of ours failing for want of the bucket, the bucket is more
// likely to have been away (a NATS node lost, its leader being elected
// again: longer than a lease) than the member dead: its key ran out as
// ours did. It is counted live for a lease more, so that it gets its own
// partitions back, resumed from the state it kept (Member parks it),
// rather than have another member claim them and rebuild them, only to
// give them back once it writes its key again. A member that did die
// then is taken over a lease later.
func (l *leases) vanish(name string) {
	if now := l.clock(); !l.failed.IsZero() && now.Sub(l.failed) < l.ttl {
		l.vanished[name] = now
	}
}

// release stops partition p and gives up its lease; lost as hand.stop's.
func (l *leases) release(ctx context.Context, p int, lost bool) {
	rev := l.mine[p].rev
	l.drop(p, lost)
	ctx, cancel := context.WithTimeout(ctx, l.writeTimeout())
	defer cancel()
	if err := l.kv.Delete(ctx, ownerKey+strconv.Itoa(p), rev); err != nil {
		l.log.Warn("group: partition not released (its lease runs out instead)", "partition", p, "err", err)
	}
	l.log.Info("group: partition released", "partition", p)
}

// drop stops partition p and forgets that we hold it, and says so to
// readers at once: before anyone can learn that the lease is free.
func (l *leases) drop(p int, lost bool) {
	h := l.mine[p]
	if h.expiry != nil {
		h.expiry()
	}
	l.hand.stop(p, h.claim, lost)
	delete(l.mine, p)
	delete(l.owners, p)
	l.publish()
}

// leave releases everything and removes our member key, so that the
// others take over at once rather than after the lease; each write within
// writeTimeout.
func (l *leases) leave() {
	ctx := context.Background()
	for p := range l.mine {
		l.release(ctx, p, false)
	}
	ctx, cancel := context.WithTimeout(ctx, l.writeTimeout())
	defer cancel()
	if err := l.kv.Delete(ctx, memberKey+l.self.Instance, 0); err != nil {
		l.log.Warn("group: member key not removed (it runs out instead)", "err", err)
	}
	l.publish()
}

// publish makes the loop's state visible to readers.
func (l *leases) publish() {
	now := l.clock()
	maps.DeleteFunc(l.vanished, func(_ string, at time.Time) bool { return now.Sub(at) >= l.ttl })
	t := &table{synced: l.synced, members: maps.Clone(l.members), owners: maps.Clone(l.owners), mine: make(map[int]grant, len(l.mine)), failed: l.failed}
	for p, h := range l.mine {
		t.mine[p] = grant{claim: h.claim, until: h.validUntil}
	}
	for p := range l.partitions {
		if l.wants(p) {
			t.wants = append(t.wants, p)
		}
	}
	l.pub.Store(t)
	l.logSkew(t)
}

// logSkew logs each member whose clock becomes further than maxSkew from
// the group's, and when it comes back.
func (l *leases) logSkew(t *table) {
	if l.maxSkew <= 0 {
		return
	}
	_, off := skews(t.members, l.maxSkew)
	for name, d := range off {
		if _, was := l.skewed[name]; !was {
			l.log.Warn("group: a member's clock is off from the group's by more than --max-skew; views are not read at its time", "member", name, "offset", time.Duration(d)*time.Millisecond, "max_skew", l.maxSkew)
		}
	}
	for name := range l.skewed {
		if _, is := off[name]; !is {
			if _, live := t.members[name]; live {
				l.log.Info("group: a member's clock is back within --max-skew of the group's", "member", name)
			}
		}
	}
	l.skewed = off
}
