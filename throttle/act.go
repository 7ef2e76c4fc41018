package throttle

import (
	"fmt"
	"strings"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// An ActKind is what chatpulse does on the chat system when a key crosses
// a policy that names it (docs/contract.md section 14): it mutes the
// user, redacts the messages the policy would have denied, or locks the
// room against a join wave. A Set only carries it: acting is the caller's.
type ActKind string

// The acts a policy may name.
const (
	ActMute   ActKind = "mute"   // message policies of a user (user_in_room, user)
	ActRedact ActKind = "redact" // message policies of a user or a room
	ActLock   ActKind = "lock"   // join_wave
)

// An Over is a message over a policy that acts (Policy.Act, enforcing),
// as ObserveBatch reports it beside the alerts: the message that crossed
// the policy (First; its alert went out too), or a later message of the
// same key while the key stays marked (denied).
type Over struct {
	Policy string
	Acts   []ActKind
	// The key's names: its room (scopes room, user_in_room) and its user
	// (user, user_in_room); "" where the key has none.
	Room, User string
	First      bool
	// The message: its id ("": it had none), room, user and event time
	// (Unix ms).
	Event, EventRoom, EventUser string
	At                          int64
	// Denied is when the key is allowed again, as of this message: the
	// end of its penalty, or when its rate falls back (Unix ms).
	Denied int64
	// The policy's window, and its lock_for.
	Window, LockFor time.Duration
}

// over is the Over of a crossing (or a later message, c.again) of p by e.
func (p *policy) over(e *chat.Event, c crossing) Over {
	r, u := keyOf(p.Scope, e.Room, e.User)
	return Over{Policy: p.Name, Acts: p.Act, Room: strings.Clone(r), User: strings.Clone(u), First: !c.again,
		Event: strings.Clone(e.ID), EventRoom: strings.Clone(e.Room), EventUser: strings.Clone(e.User), At: e.TS,
		Denied: c.denied, Window: p.Window, LockFor: p.LockFor}
}

// slowOver is the Over of a message slow mode would have denied (until
// `until`): it is redacted.
func slowOver(e *chat.Event, until int64) Over {
	return Over{Policy: ActionSlowmode, Acts: []ActKind{ActRedact}, Room: strings.Clone(e.Room), User: strings.Clone(e.User), First: true,
		Event: strings.Clone(e.ID), EventRoom: strings.Clone(e.Room), EventUser: strings.Clone(e.User), At: e.TS, Denied: until}
}

// DefaultLockFor is how long a lock holds after the wave's last
// crossing when the policy does not say.
const DefaultLockFor = 10 * time.Minute

// Acts reports whether the policy names act k.
func (p *Policy) Acts(k ActKind) bool {
	for _, a := range p.Act {
		if a == k {
			return true
		}
	}
	return false
}

// validateAct checks Act and LockFor: each act known, once, and one the
// policy's algorithm and scope can do: a join wave locks its room; a
// message policy mutes a user (so its key names one) and redacts the
// messages of a user or a room, never of the whole group.
func (p Policy) validateAct(alg *algorithm) *FieldError {
	if len(p.Act) > 0 && p.Mode == ModeShadow {
		return fieldErr("act", "a shadow policy denies nothing, so it acts on nothing (--act-mode shadow shows what acts would do)")
	}
	for i, k := range p.Act {
		field := fmt.Sprintf("act[%d]", i)
		for _, earlier := range p.Act[:i] {
			if earlier == k {
				return fieldErr(field, "%q is named twice", k)
			}
		}
		switch {
		case k != ActMute && k != ActRedact && k != ActLock:
			return fieldErr(field, "%q is not an act (valid: mute, redact, lock)", k)
		case alg.joins && k != ActLock:
			return fieldErr(field, "a join_wave decides no message: it can lock its room, not %s", k)
		case !alg.joins && k == ActLock:
			return fieldErr(field, "only a join_wave locks a room; %s counts messages (mute, redact)", alg.name)
		case k == ActMute && p.Scope != ScopeUserInRoom && p.Scope != ScopeUser:
			return fieldErr(field, "mute needs a key that names a user (scope user_in_room or user), got %s", p.Scope)
		case k == ActRedact && p.Scope == ScopeGroup:
			return fieldErr(field, "redact needs a key that names a user or a room (scope user_in_room, user or room), got group")
		}
	}
	if p.Acts(ActLock) && (p.Penalty != 0 || len(p.Escalate) > 0) {
		return fieldErr("act", "a join_wave that locks its room denies joins for lock_for after its crossing: give lock_for, not a penalty")
	}
	if p.LockFor == 0 {
		return nil
	}
	if !p.Acts(ActLock) {
		return fieldErr("lock_for", "only with act: [lock]")
	}
	return validDuration("lock_for", p.LockFor, MaxWindow)
}
