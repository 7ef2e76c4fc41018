package lease

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
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

// Member is the value of a member's key.
type Member struct {
	Instance string `json:"instance"`
	HTTP     string `json:"http"`
	Lag      uint64 `json:"lag"`             // messages its partitions have yet to read
	Clock    int64  `json:"clock,omitempty"` // its event clock when it sent the write, Unix ms (0: not said)
	// Offset is Clock less the server's clock when it stored the write
	// (Entry.Created): how far ahead of the server's clock the member's
	// is, give or take the write's trip; valid if Clock is set.
	Offset int64 `json:"-"`
}

// Owner is the value of a partition's key.
type Owner struct {
	Instance string `json:"instance"`
	Ready    bool   `json:"ready"` // caught up: it answers for the partition
}

// A KV is the bucket the leases live in: compare-and-set writes of
// keys that expire ttl after their last write, and a watch of every key.
// bus.Bucket is one over JetStream (Open); the tests have one in
// memory. Its entries are bus.Entry because bus cannot name a type of
// ours.
type KV interface {
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

// A Hand is what the lease loop does with the partitions it wins and loses:
// start one (it calls CaughtUp with the same claim when caught up), stop one
// (synchronously: when stop returns nothing of it is counted, answered or
// acted on any more). stop is called by the loop and by a partition's
// validity timer, maybe at once and more than once for one claim: it stops
// the partition only if it runs by that claim. lost says the lease was
// lost (it ran out, or the bucket lost it) rather than given up: the
// partition may well come back to this member, so hand may keep its state
// (Member parks it) to resume from instead of rebuilding it.
type Hand interface {
	Start(p int, claim uint64)
	Stop(p int, claim uint64, lost bool)
}

// held is a partition this member holds the lease of.
type held struct {
	claim      uint64      // revision of the write that claimed it
	rev        uint64      // revision of our last write of its key
	validUntil time.Time   // we answer as its owner until then
	ready      bool        // caught up, and said so in the key (Owner.Ready)
	caughtUp   bool        // caught up, said so or not yet
	expiry     func() bool // stops the validity timer (true: before it fired)
}

// A Grant is a partition this member holds, as readers see it: by which
// claim, and until when it may answer and act for it.
type Grant struct {
	Claim uint64
	Until time.Time
}

// A Table is what the lease loop knows, published for readers as one
// immutable value.
type Table struct {
	Synced  bool // the loop has seen every key there was when it began
	Members map[string]Member
	Owners  map[int]Owner
	Mine    map[int]Grant // partitions held
	Wants   []int         // partitions rendezvous gives us
	Failed  time.Time     // when a write of ours to the bucket last failed (zero: never)
}

// Owns reports whether this member may answer for partition p at now.
func (t *Table) Owns(p int, now time.Time) bool {
	return t.Valid(p, t.Mine[p].Claim, now) && t.Owners[p].Ready
}

// Valid reports whether this member holds partition p by claim at now,
// caught up or not: whether it may act for it (alerts, dead letters,
// progress).
func (t *Table) Valid(p int, claim uint64, now time.Time) bool {
	g, ok := t.Mine[p]
	return ok && g.Claim == claim && now.Before(g.Until)
}

// A Loop runs one member's leases (the package's doc says how). Tests
// drive it a step at a time (apply, takeNotes, tick, settle) over a fake
// bucket and clock.
type Loop struct {
	kv         KV
	clock      func() time.Time // elapsed time: time.Now; the tests' is a fake
	self       Member
	partitions int
	ttl        time.Duration
	hand       Hand
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
	pub     atomic.Pointer[Table] // what readers see

	// Owned by run.
	synced  bool // the watch has delivered every key there was
	members map[string]Member
	owners  map[int]Owner
	mine    map[int]*held
	// A new watch's keys, until they have all come and replace members
	// and owners; nil while no new watch is being read.
	nextMembers map[string]Member
	nextOwners  map[int]Owner
	// failed is when a write of ours last failed for want of the bucket
	// (not for a compare-and-set); vanished, the members whose keys went
	// while or soon after ours could not be written, and when: they are
	// counted live a lease longer (wants).
	failed   time.Time
	vanished map[string]time.Time
}

// Config is what a Loop is made of.
type Config struct {
	Self  Member // this member: its name and where it serves
	Slots int    // leases, one per partition (and one for the filer: the last)
	TTL   time.Duration
	Hand  Hand
	Log   *slog.Logger
	// Lag and Stamp fill the member key at each write: the messages this
	// member has yet to read, and its event clock (nil: 0, not said).
	Lag   func() uint64
	Stamp func() time.Time
	// MaxSkew: a member whose clock is further from the group's is
	// logged (0: none).
	MaxSkew time.Duration
}

// New makes a member's lease loop over kv; nothing is written until Join.
func New(kv KV, c Config) *Loop {
	l := &Loop{kv: kv, clock: time.Now, after: afterFunc, self: c.Self, partitions: c.Slots, ttl: c.TTL, hand: c.Hand, log: c.Log,
		lag: c.Lag, stamp: c.Stamp, maxSkew: c.MaxSkew,
		caught: map[int]uint64{}, expired: map[int]uint64{}, notes: make(chan struct{}, 1),
		members: map[string]Member{}, owners: map[int]Owner{}, mine: map[int]*held{}, vanished: map[string]time.Time{}}
	l.publish()
	return l
}

// Open makes group's lease bucket: keys live ttl after their last write,
// and their expiry is told to watchers, so that a member that dies is
// seen gone within about ttl.
func Open(ctx context.Context, b *bus.Bus, group string, replicas int, ttl time.Duration) (*bus.Bucket, error) {
	return b.LeaseBucket(ctx, bus.GroupLeases(group), "chatpulse group "+group+": members and partition owners", ttl, replicas)
}

func afterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Now reads the leases' clock: what a lease's validity (Table.Valid,
// Table.Owns) is to be compared with.
func (l *Loop) Now() time.Time { return l.clock() }

// WriteTimeout is the deadline of each write to the bucket, and of all of
// a tick's renewals together: a write that has not come back by then
// counts as failed (and, if it got through after all, it only extends a
// lease the next tick renews or lets run out).
func (l *Loop) WriteTimeout() time.Duration { return l.ttl / 4 }

// CaughtUp tells the loop that partition p, as claimed by claim, has caught
// up. It never blocks.
func (l *Loop) CaughtUp(p int, claim uint64) {
	l.notesMu.Lock()
	l.caught[p] = claim
	l.notesMu.Unlock()
	l.wake()
}

// Expire is partition p's validity timer, for claim (and its fence, when
// it finds the validity over first): it stops the partition at once, then
// tells the loop, which may be stuck in a write.
func (l *Loop) Expire(p int, claim uint64) {
	l.hand.Stop(p, claim, true)
	l.notesMu.Lock()
	l.expired[p] = claim
	l.notesMu.Unlock()
	l.wake()
}

func (l *Loop) wake() {
	select {
	case l.notes <- struct{}{}:
	default:
	}
}

// Table is the latest published table.
func (l *Loop) Table() *Table { return l.pub.Load() }

// Join creates this member's key. A key with our name that is still there
// may be a previous run of ours that died: it is gone within ttl, so we
// wait that long before saying that a live member has the name.
func (l *Loop) Join(ctx context.Context) error {
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
			return ErrDuplicate
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// ErrDuplicate: a live member of the group has this member's name.
var ErrDuplicate = errors.New("a live member of the group already has this instance name")

// Run keeps the leases until ctx is done, then releases every partition
// it holds and removes its member key.
func (l *Loop) Run(ctx context.Context) error {
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
		l.nextMembers, l.nextOwners = map[string]Member{}, map[int]Owner{}
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
func (l *Loop) settle(ctx context.Context) {
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
func (l *Loop) takeNotes(ctx context.Context) {
	l.notesMu.Lock()
	var expired []int
	for p, claim := range l.caught {
		if h := l.mine[p]; h != nil && h.claim == claim {
			h.caughtUp = true
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
func (l *Loop) apply(e *bus.Entry) {
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
		var m Member
		if gone || json.Unmarshal(e.Data, &m) != nil {
			if _, was := members[name]; was && l.nextMembers == nil {
				l.vanish(name)
			}
			delete(members, name)
			return
		}
		delete(l.vanished, name)
		if m.Clock != 0 && !e.Created.IsZero() {
			m.Offset = m.Clock - e.Created.UnixMilli()
		}
		members[name] = m
	case strings.HasPrefix(key, ownerKey):
		p, err := strconv.Atoi(key[len(ownerKey):])
		if err != nil {
			return
		}
		var o Owner
		if gone || json.Unmarshal(e.Data, &o) != nil {
			delete(owners, p)
			return
		}
		owners[p] = o
	}
}
