package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/moderation"
)

// Moderation keeps the moderators' actions (docs/contract.md section 11)
// for an instance, whichever engine it runs: the Book its checks decide
// with, filled from the bucket CHATPULSE_MODERATION (watched, so that
// every member of a group and every restart sees the same actions), the
// writes of this instance's moderators, and the audit trail of every
// change on chatpulse.moderation.<kind>, kept in CHATPULSE_MODERATION_LOG.
// Without JetStream the actions are this instance's alone, and lost when
// it stops.
type Moderation struct {
	Book *moderation.Book
	log  *slog.Logger
	now  func() time.Time

	bus    *bus.Bus
	bucket *bus.Bucket // nil: without JetStream

	mu   sync.Mutex        // one change of the book at a time
	revs map[string]uint64 // each key's revision in the bucket
	// Settle, if set, waits until every part of the engine holds a
	// revision (Engine.Settle): a Put returns only then.
	Settle func(ctx context.Context, rev uint64) error
	// Acts, if set, is given each entry of the bucket's act.* keys: the
	// undos of acts due (package act), which are not moderators' actions.
	Acts func(*bus.Entry)
}

// Bucket is the moderation bucket; nil without JetStream, or before
// Attach.
func (m *Moderation) Bucket() *bus.Bucket { return m.bucket }

// NewModeration returns an empty keeper of actions.
func NewModeration(now func() time.Time, log *slog.Logger) *Moderation {
	return &Moderation{Book: moderation.NewBook(), now: now, log: log, revs: map[string]uint64{}}
}

// Attach makes the bucket and the audit stream (with JetStream), reads the
// actions kept, and watches for changes until ctx is done.
func (m *Moderation) Attach(ctx context.Context, b *bus.Bus, jetStream bool, replicas int) error {
	m.bus = b
	if !jetStream {
		return nil
	}
	if err := b.EnsureModerationLog(ctx, replicas); err != nil {
		return err
	}
	k, err := b.Bucket(ctx, bus.ModerationBucket, "chatpulse: moderators' actions in force", replicas)
	if err != nil {
		return err
	}
	m.bucket = k
	w, err := k.WatchAll(ctx)
	if err != nil {
		return err
	}
	synced := make(chan struct{})
	go m.watch(ctx, w, synced)
	select { // the actions kept are in force before anything is checked
	case <-synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch takes every change of the bucket into the book; a value that is
// not a valid action of its key is logged and ignored. The actions kept
// when it starts go in at once, when the watch has delivered them all.
func (m *Moderation) watch(ctx context.Context, w <-chan *bus.Entry, synced chan struct{}) {
	var first []moderation.Action // until synced
	var firstRev uint64
	for {
		e, ok := <-w
		if !ok {
			if ctx.Err() != nil {
				return
			}
			m.log.Warn("moderation: the watch of the actions broke; watching again")
			for ctx.Err() == nil {
				var err error
				if w, err = m.bucket.WatchAll(ctx); err == nil {
					break
				}
				time.Sleep(time.Second)
			}
			continue
		}
		if e != nil && strings.HasPrefix(e.Key, bus.ActKeys) {
			if m.Acts != nil {
				m.Acts(e) // an act's undo, not a moderator's action
			}
			continue
		}
		if e == nil {
			if synced != nil {
				m.mu.Lock()
				m.Book.PutAll(first, firstRev)
				m.mu.Unlock()
				first = nil
				close(synced)
				synced = nil
			}
			continue
		}
		if synced != nil && !e.Deleted { // the keys there were: one step at the end
			if a, err := moderation.Parse(e.Key, e.Data); err == nil {
				first, firstRev = append(first, a), max(firstRev, e.Revision)
				m.mu.Lock()
				m.revs[e.Key] = e.Revision
				m.mu.Unlock()
			} else {
				m.log.Warn("moderation: an action in the bucket is not valid; ignored", "err", err)
			}
			continue
		}
		m.mu.Lock()
		switch a, err := moderation.Parse(e.Key, e.Data); {
		case e.Revision <= m.revs[e.Key]: // written here first
		case e.Deleted:
			m.Book.Delete(e.Key, e.Revision)
			delete(m.revs, e.Key)
		case err != nil:
			m.log.Warn("moderation: an action in the bucket is not valid; ignored", "err", err)
		default:
			m.Book.Put(a, e.Revision)
			m.revs[e.Key] = e.Revision
		}
		m.mu.Unlock()
	}
}

// An Audit is one entry of the moderators' audit trail.
type Audit struct {
	Event  string            `json:"event"` // set, changed, lifted, expired
	Action moderation.Action `json:"action"`
	Actor  string            `json:"actor,omitempty"`
	At     chat.Time         `json:"at"`
}

// ErrInvalid is an action that does not validate: the caller's fault.
var ErrInvalid = errors.New("not a valid action")

// Put puts a in force, replacing the action of its key, everywhere: in
// the bucket, then this instance's book (so that its next check sees it),
// then the audit trail. It returns what it put.
func (m *Moderation) Put(ctx context.Context, a moderation.Action) (moderation.Action, error) {
	a.Set = chat.Time(m.now().UnixMilli())
	if err := a.Validate(); err != nil {
		return a, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	rev, had, err := m.put(ctx, a)
	if err != nil {
		return a, err
	}
	event := "set"
	if had {
		event = "changed"
	}
	m.audit(ctx, event, a, a.Actor, rev)
	if m.Settle != nil && rev != 0 {
		if err := m.Settle(ctx, rev); err != nil {
			return a, err
		}
	}
	return a, nil
}

// put writes a to the bucket and the book, and returns the revision, and
// whether it replaced an action in force.
func (m *Moderation) put(ctx context.Context, a moderation.Action) (rev uint64, had bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, had := m.Book.Lookup(a.Key())
	had = had && old.InForce(int64(a.Set))
	if m.bucket != nil {
		data, _ := json.Marshal(a)
		if rev, err = m.bucket.Put(ctx, a.Key(), data); err != nil {
			return 0, false, err
		}
		m.revs[a.Key()] = rev
	}
	m.Book.Put(a, rev)
	return rev, had, nil
}

// Lift ends the action kept under key, and reports whether there was one.
func (m *Moderation) Lift(ctx context.Context, key, actor string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.Book.Lookup(key)
	if !ok {
		return false, nil
	}
	if m.bucket != nil {
		if err := m.bucket.Delete(ctx, key, 0); err != nil {
			return false, err
		}
	}
	m.Book.Delete(key, 0)
	delete(m.revs, key)
	m.audit(ctx, "lifted", a, actor, 0)
	return true, nil
}

// Sweep ends the actions whose expiry has come by now: each is taken out
// of the bucket (by whichever member gets there first: the write is
// compare-and-set) and its expiry told once in the audit trail (every
// member tells it under one id, which the stream keeps once). Each gets a
// write's deadline of its own: a raid's thousands expiring at once are
// all removed and told, however long that takes, until ctx is done.
func (m *Moderation) Sweep(ctx context.Context, now int64) {
	_, expired := m.Book.List(now)
	for _, a := range expired {
		if ctx.Err() != nil {
			return // the next sweep goes on
		}
		m.expire(ctx, a)
	}
}

// expire ends the expired action a, if it is still the one kept.
func (m *Moderation) expire(ctx context.Context, a moderation.Action) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	m.mu.Lock()
	if cur, ok := m.Book.Lookup(a.Key()); !ok || cur.Set != a.Set { // set again meanwhile
		m.mu.Unlock()
		return
	}
	rev := m.revs[a.Key()]
	if m.bucket != nil {
		if err := m.bucket.Delete(ctx, a.Key(), rev); err != nil && !errors.Is(err, bus.ErrKeyChanged) {
			m.log.Warn("moderation: an expired action not removed", "key", a.Key(), "err", err)
		}
	}
	m.Book.Delete(a.Key(), 0)
	delete(m.revs, a.Key())
	m.mu.Unlock()
	m.audit(ctx, "expired", a, "", rev)
}

// writeTimeout is how long one write of an action (and its audit entry)
// may take.
const writeTimeout = 5 * time.Second

// audit publishes one entry of the trail, named by its event, key and
// the revision it concerns, so that the stream keeps it once.
func (m *Moderation) audit(ctx context.Context, event string, a moderation.Action, actor string, rev uint64) {
	if m.bus == nil {
		return
	}
	data, _ := json.Marshal(Audit{Event: event, Action: a, Actor: actor, At: chat.Time(m.now().UnixMilli())})
	id := event + "|" + a.Key() + "|" + strconv.FormatUint(rev, 10)
	if rev == 0 {
		id += "|" + strconv.FormatInt(int64(a.Set), 10)
	}
	if err := m.bus.Audit(ctx, string(a.Kind), id, data); err != nil {
		m.log.Warn("moderation: audit entry not kept", "event", event, "key", a.Key(), "err", err)
	}
}

// List is every action in force at now.
func (m *Moderation) List(now int64) []moderation.Action {
	in, _ := m.Book.List(now)
	return in
}
