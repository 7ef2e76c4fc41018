package act

import (
	"context"
	"time"

	"github.com/chatpulse/chatpulse/moderation"
	"github.com/chatpulse/chatpulse/throttle"
)

// Moderators' timeouts mute (docs/contract.md section 14): the user, in
// the timeout's room or in every room where they posted within the
// largest window, until the timeout ends. Its records say so by their
// policy, "timeout", and a due of 0 while the timeout has no end: it is
// undone when lifted.

// Timeouts takes the timeouts in force at now, whenever the moderators'
// actions change: each is muted for if this instance holds its part
// (part says whose: a room's timeout is its room's partition's, an
// everywhere timeout its user's), and a mute of a timeout that is no
// longer in force is undone now.
func (a *Actor) Timeouts(inForce []moderation.Action, now int64, part func(room, user string) string, largest time.Duration) {
	want := map[string]bool{} // record keys of rooms' timeouts in force held here
	everywhere := map[string]*moderation.Action{}
	for i := range inForce {
		t := &inForce[i]
		if t.Kind != moderation.Timeout || !t.InForce(now) {
			continue
		}
		p := ""
		if part != nil {
			p = part(t.Room, t.User)
		}
		if !a.cfg.Owns(p) {
			continue
		}
		due := int64(0) // until lifted
		if t.Until != nil {
			due = int64(*t.Until)
		}
		if t.Room == "" {
			everywhere[t.User] = t
			a.q.push(a.timeoutEverywhereJob(p, t.User, due, largest, now))
			continue
		}
		want[recordKey(Mute, t.Room, t.User)] = true
		a.timeoutMute(p, t.Room, t.User, due)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, r := range a.recs {
		if r.Policy != timeoutPolicy || r.state != active || want[key] || everywhere[r.User] != nil || !a.cfg.Owns(r.Part) {
			continue
		}
		r.Due, r.dirty = now, true // lifted, or ended: undo now
		a.kick()
	}
}

// timeoutMute mutes user in room for a timeout until due (0: until
// lifted); a mute there already is held that long.
func (a *Actor) timeoutMute(part, room, user string, due int64) {
	key := recordKey(Mute, room, user)
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.recs[key]; r != nil {
		if r.state != undoing && (due == 0 || r.Due != 0 && due > r.Due) {
			r.Due, r.Policy, r.dirty = due, timeoutPolicy, true
			a.kick()
		}
		return
	}
	r := &record{Kind: Mute, Room: room, User: user, Policy: timeoutPolicy, Part: part, Due: due, key: key}
	a.recs[key] = r
	if !a.q.push(a.muteJob(r)) {
		delete(a.recs, key)
	}
}

// timeoutPolicy names a timeout's mutes, as its decisions do.
var timeoutPolicy = throttle.ActionTimeout

// timeoutEverywhereJob mutes user, timed out everywhere until due, in
// every room where they posted within the largest window.
func (a *Actor) timeoutEverywhereJob(part, user string, due int64, largest time.Duration, now int64) job {
	return job{kind: Mute, user: user, do: func(ctx context.Context) (string, error) {
		if a.cfg.Rooms != nil {
			for _, room := range a.cfg.Rooms(user, largest, now) {
				a.timeoutMute(part, room, user, due)
			}
		}
		return "", errSkipped
	}, done: func(string, error) {}}
}
