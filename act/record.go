package act

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/throttle"
)

// A record is an undo due: a mute or a lock that chatpulse made, what it
// found before, and what it set. It is kept in the bucket before the
// change is made, so that the undo is never lost; it is deleted once the
// undo is done. An undo puts back Prev only where it finds Set: what
// someone else changed since stays as they left it, and an undo done
// twice (a crash between the undo and the delete) finds nothing to do
// the second time.
type record struct {
	Kind   Kind   `json:"kind"` // Mute or Lock
	Room   string `json:"room"`
	User   string `json:"user,omitempty"`
	Policy string `json:"policy"`
	// Part is the group's partition stage whose holder undoes it ("":
	// standalone).
	Part string `json:"part,omitempty"`
	Due  int64  `json:"due"` // Unix ms; 0: until lifted (a timeout's)
	// Prev is what was there: a mute's level of the user (absent: no
	// entry), a lock's join rules content. Set is what chatpulse set
	// (absent: nothing yet).
	Prev     json.RawMessage `json:"prev,omitempty"`
	Set      json.RawMessage `json:"set,omitempty"`
	Event    string          `json:"event,omitempty"` // the homeserver's event of the change
	Answered []string        `json:"answered,omitempty"`
	Shadow   bool            `json:"shadow,omitempty"`

	// Under Actor.mu.
	key   string
	rev   uint64 // the bucket's revision of it (0: not kept)
	state recState
	dirty bool // Due moved since it was kept
}

type recState uint8

const (
	pending recState = iota // its job is queued: nothing changed yet
	active                  // changed (or perhaps: kept before a crash); undone at Due
	undoing                 // its undo is queued
)

// mute has o.User muted in room until o.Denied; a mute of them there
// that holds already is held that long at least.
func (a *Actor) mute(part string, o throttle.Over, room string) {
	key := recordKey(Mute, room, o.User)
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.recs[key]; r != nil {
		a.hold(r, o.Denied)
		return
	}
	if until, ok := a.skipped[key]; ok && until >= o.At {
		return // a moderator, the bot or exempt: found so lately
	}
	r := &record{Kind: Mute, Room: room, User: o.User, Policy: o.Policy, Part: part, Due: o.Denied, key: key}
	if o.Event != "" {
		r.Answered = []string{o.Event}
	}
	a.recs[key] = r
	if !a.q.push(a.muteJob(r)) {
		delete(a.recs, key)
	}
}

// muteEverywhere has o.User (of a policy of scope user) muted in every
// room where they posted within the policy's window: the rooms are found
// when the job runs (a group asks other members).
func (a *Actor) muteEverywhere(part string, o throttle.Over) {
	a.mu.Lock()
	defer a.mu.Unlock()
	held := false
	for _, r := range a.recs {
		if r.Kind == Mute && r.User == o.User && r.Policy == o.Policy {
			a.hold(r, o.Denied)
			held = true
		}
	}
	if !held {
		a.q.push(a.everywhereJob(part, o))
	}
}

// lock has o.Room locked until o.LockFor after o.At; a lock of it that
// holds already is held that long at least.
func (a *Actor) lock(part string, o throttle.Over) {
	key := recordKey(Lock, o.Room, "")
	due := o.At + o.LockFor.Milliseconds()
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.recs[key]; r != nil {
		a.hold(r, due)
		return
	}
	r := &record{Kind: Lock, Room: o.Room, Policy: o.Policy, Part: part, Due: due, key: key}
	if o.Event != "" {
		r.Answered = []string{o.Event}
	}
	a.recs[key] = r
	if !a.q.push(a.lockJob(r)) {
		delete(a.recs, key)
	}
}

// redact has the message of o redacted, once: a message over two
// policies (a flood under slow mode) is redacted by the first.
func (a *Actor) redact(o throttle.Over) {
	a.mu.Lock()
	seen := a.redacted.seen(o.Event)
	a.mu.Unlock()
	if !seen {
		a.q.push(a.redactJob(o))
	}
}

// recent is a bounded set of the last ids added.
type recent struct {
	ids  map[string]struct{}
	ring []string
	next int
}

// recentRedactions is how many redacted events an Actor remembers, not to
// redact one twice: far more than a burst of messages over its policies.
const recentRedactions = 4096

// seen adds id and reports whether it was there already.
func (r *recent) seen(id string) bool {
	if r.ids == nil {
		r.ids, r.ring = map[string]struct{}{}, make([]string, recentRedactions)
	}
	if _, ok := r.ids[id]; ok {
		return true
	}
	delete(r.ids, r.ring[r.next])
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.ids[id] = struct{}{}
	return false
}

// hold moves r's undo to due if that is later (a timeout's, due 0, is
// undone when lifted, not before); a.mu is held.
func (a *Actor) hold(r *record, due int64) {
	if r.Due != 0 && due > r.Due && r.state != undoing {
		r.Due, r.dirty = due, true
		a.kick()
	}
}

// keep writes r to the bucket (its value as now), and records the
// revision. Without a bucket, or in shadow mode, it keeps nothing.
func (a *Actor) keep(ctx context.Context, r *record) error {
	if a.cfg.Bucket == nil || r.Shadow {
		return nil
	}
	a.mu.Lock()
	data, _ := json.Marshal(r)
	r.dirty = false
	a.mu.Unlock()
	rev, err := a.cfg.Bucket.Put(ctx, r.key, data)
	if err != nil {
		return err
	}
	a.mu.Lock()
	r.rev = max(r.rev, rev)
	a.mu.Unlock()
	return nil
}

// forget deletes r, done or found needless, here and from the bucket.
func (a *Actor) forget(ctx context.Context, r *record) {
	a.mu.Lock()
	if a.recs[r.key] == r {
		delete(a.recs, r.key)
	}
	rev := r.rev
	a.mu.Unlock()
	if a.cfg.Bucket == nil || rev == 0 {
		return
	}
	if err := a.cfg.Bucket.Delete(ctx, r.key, 0); err != nil {
		a.cfg.Log.Warn("act: a record not deleted from the bucket; its undo finds nothing to do next time", "key", r.key, "err", err)
	}
}

// Kept takes in a change of the bucket's act.* keys (a watch's entry):
// records kept by an earlier run, or by another member of a group, whose
// undos this instance does when due if it holds their part (a takeover);
// and the deletes of records another member undid.
func (a *Actor) Kept(e *bus.Entry) {
	if e == nil || !strings.HasPrefix(e.Key, bus.ActKeys) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	cur := a.recs[e.Key]
	if e.Deleted {
		if cur != nil && cur.rev != 0 && e.Revision > cur.rev && cur.state == active {
			delete(a.recs, e.Key) // undone elsewhere
		}
		return
	}
	if cur != nil {
		cur.rev = max(cur.rev, e.Revision) // our own write, or one we hold already
		return
	}
	var r record
	if err := json.Unmarshal(e.Data, &r); err != nil || (r.Kind != Mute && r.Kind != Lock) || r.Set == nil {
		a.cfg.Log.Warn("act: a record in the bucket is not valid; ignored", "key", e.Key, "err", err)
		return
	}
	r.key, r.rev, r.state = e.Key, e.Revision, active
	a.recs[e.Key] = &r
	a.kick()
}
