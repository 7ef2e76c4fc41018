// Package moderation holds the actions moderators set at runtime
// (docs/contract.md section 11): slow mode in a room, a user's timeout in a
// room or everywhere, each with an expiry and its exemptions; how an action
// is written as a key-value entry and read back from one as if hostile; and
// the Book of the actions in force, which every check reads.
//
// An action ends at its expiry without anything ticking for it: the Book
// answers as of the instant it is asked, as the windows do. It never reads
// the clock, talks to the network or decides a check: throttle does, with
// what the Book answers.
package moderation

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// A Kind is what an action does.
type Kind string

// The kinds of action.
const (
	// Slowmode lets each user post one message per Interval in Room.
	Slowmode Kind = "slowmode"
	// Timeout denies every message of User, in Room or (Room empty)
	// everywhere.
	Timeout Kind = "timeout"
)

// MaxInterval is the longest slow-mode interval.
const MaxInterval = 24 * time.Hour

// An Action is one moderator's action, as kept in the bucket
// CHATPULSE_MODERATION and listed by GET /api/v1/moderation.
type Action struct {
	Kind Kind   `json:"kind"`
	Room string `json:"room,omitempty"`
	User string `json:"user,omitempty"`
	// Interval is slow mode's: one message per user per interval, in ms.
	Interval int64 `json:"interval_ms,omitempty"`
	// Until is when it ends; nil: when it is lifted.
	Until  *chat.Time `json:"until"`
	Reason string     `json:"reason,omitempty"`
	Actor  string     `json:"actor,omitempty"`
	Set    chat.Time  `json:"set"`
	// ExemptUsers (globs) and ExemptRoles are not held by it.
	ExemptUsers []string `json:"exempt_users,omitempty"`
	ExemptRoles []string `json:"exempt_roles,omitempty"`
}

// Limits of what an action holds.
const (
	maxText    = 512 // reason, actor
	maxExempts = 64  // exempt_users, exempt_roles
)

// Key is where the action is kept in the bucket: its kind and the
// base64url of its names, which a key may hold whatever the names are.
func (a *Action) Key() string { return KeyOf(a.Kind, a.Room, a.User) }

// KeyOf is the key of the action of kind on room and user.
func KeyOf(kind Kind, room, user string) string {
	enc := base64.RawURLEncoding.EncodeToString
	switch kind {
	case Slowmode:
		return "slowmode." + enc([]byte(room))
	case Timeout:
		if room == "" {
			return "timeout." + enc([]byte(user))
		}
		return "timeout." + enc([]byte(user)) + "." + enc([]byte(room))
	}
	return ""
}

// InForce reports whether the action holds at now (Unix ms).
func (a *Action) InForce(now int64) bool { return a.Until == nil || int64(*a.Until) > now }

// Validate reports the first thing wrong with a, naming the field: an
// action that does not validate is never kept, nor used.
func (a *Action) Validate() error {
	switch a.Kind {
	case Slowmode:
		if err := chat.CheckNameLen("room", a.Room, chat.MaxForeignNameLen); err != nil {
			return err
		}
		if a.User != "" {
			return errors.New("user: a slow mode has none")
		}
		if a.Interval <= 0 || a.Interval > MaxInterval.Milliseconds() {
			return fmt.Errorf("interval: must be 1ms..%s, got %s", rolling.FormatDuration(MaxInterval), rolling.FormatDuration(time.Duration(a.Interval)*time.Millisecond))
		}
	case Timeout:
		if err := chat.CheckNameLen("user", a.User, chat.MaxForeignNameLen); err != nil {
			return err
		}
		if a.Room != "" {
			if err := chat.CheckNameLen("room", a.Room, chat.MaxForeignNameLen); err != nil {
				return err
			}
		}
		if a.Interval != 0 {
			return errors.New("interval: a timeout has none")
		}
	default:
		return fmt.Errorf("kind: %q is not an action (valid: slowmode, timeout)", a.Kind)
	}
	switch {
	case len(a.Reason) > maxText:
		return fmt.Errorf("reason: at most %d bytes, got %d", maxText, len(a.Reason))
	case len(a.Actor) > maxText:
		return fmt.Errorf("actor: at most %d bytes, got %d", maxText, len(a.Actor))
	case len(a.ExemptUsers) > maxExempts || len(a.ExemptRoles) > maxExempts:
		return fmt.Errorf("exempt_users, exempt_roles: at most %d each", maxExempts)
	}
	for i, g := range a.ExemptUsers {
		if _, err := chat.CompileGlob(g); err != nil {
			return fmt.Errorf("exempt_users[%d]: %q: %v", i, g, err)
		}
	}
	for i, r := range a.ExemptRoles {
		if err := CheckRole(r); err != nil {
			return fmt.Errorf("exempt_roles[%d]: %v", i, err)
		}
	}
	return nil
}

// CheckRole reports what is wrong with a role's name: 1 to 64 letters,
// digits, '_', '-', '.' or ':'.
func CheckRole(r string) error {
	if r == "" || len(r) > 64 {
		return fmt.Errorf("a role is 1..64 bytes, got %d", len(r))
	}
	for _, c := range []byte(r) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':') {
			return fmt.Errorf("%q: a role holds letters, digits, '_', '-', '.' and ':'", r)
		}
	}
	return nil
}

// Parse reads an action kept under key, as if hostile: it must be one
// JSON object of an action that validates and is kept under its own key.
func Parse(key string, data []byte) (Action, error) {
	var a Action
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return Action{}, fmt.Errorf("%s: %v", key, err)
	}
	if dec.More() {
		return Action{}, fmt.Errorf("%s: data after the action", key)
	}
	if err := a.Validate(); err != nil {
		return Action{}, fmt.Errorf("%s: %v", key, err)
	}
	if a.Key() != key {
		return Action{}, fmt.Errorf("%s: holds the action of %s", key, a.Key())
	}
	return a, nil
}

// Exempts reports whether user, with roles, is exempt from a rule that
// exempts users (globs) and roles.
func Exempts(users, roles []string, user string, userRoles []string) bool {
	for _, r := range userRoles {
		if slices.Contains(roles, r) {
			return true
		}
	}
	for _, p := range users {
		if g, err := chat.CompileGlob(p); err == nil && g.Match(user) {
			return true
		}
	}
	return false
}

// A Book holds the actions in force. A change takes its lock, and costs
// the same however many actions it holds (a raid's hundred thousand
// timeouts): it changes the indexes of its key alone. Checks read under
// the read lock; Empty, most checks' case, reads no lock at all. The
// actions are never changed in place: a pointer a reader got stays the
// action as it was.
type Book struct {
	mu       sync.RWMutex
	rev      uint64        // the newest revision of the bucket it holds
	changed  chan struct{} // closed, and made anew, at every change (Await)
	all      map[string]*Action
	slowmode map[string]*Action    // by room
	timeout  map[string]*Action    // by user: everywhere
	inRoom   map[[2]string]*Action // by user and room
	peak     int                   // the most actions held since the maps were made
	n        atomic.Int64          // len(all), for Empty
}

// NewBook returns an empty book.
func NewBook() *Book {
	b := &Book{changed: make(chan struct{})}
	b.reset()
	return b
}

// reset makes the indexes anew, empty; b.mu is held (or b is new).
func (b *Book) reset() {
	b.all, b.slowmode, b.timeout, b.inRoom = map[string]*Action{}, map[string]*Action{}, map[string]*Action{}, map[[2]string]*Action{}
	b.peak = 0
}

// Put keeps a (valid) in the book, replacing the action of its key, as of
// revision rev of the bucket (0: none); Delete forgets the action of key.
func (b *Book) Put(a Action, rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.put(&a)
	b.changedAt(rev)
}

// Delete forgets the action kept under key, as of revision rev.
func (b *Book) Delete(key string, rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.remove(key)
	b.changedAt(rev)
}

// PutAll keeps every action of as in the book at once, as of revision rev:
// how the actions kept in the bucket are read at start, in one step.
func (b *Book) PutAll(as []Action, rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range as {
		a := as[i]
		b.put(&a)
	}
	b.changedAt(rev)
}

// put indexes a, replacing the action of its key; b.mu is held.
func (b *Book) put(a *Action) {
	key := a.Key()
	b.remove(key)
	b.all[key] = a
	switch {
	case a.Kind == Slowmode:
		b.slowmode[a.Room] = a
	case a.Room == "":
		b.timeout[a.User] = a
	default:
		b.inRoom[[2]string{a.User, a.Room}] = a
	}
	b.peak = max(b.peak, len(b.all))
}

// remove unindexes the action of key; b.mu is held. Maps keep their room
// once grown: when a raid's actions have gone (a quarter of the most held
// is left), the indexes are made anew, and the memory given back.
func (b *Book) remove(key string) {
	a, ok := b.all[key]
	if !ok {
		return
	}
	delete(b.all, key)
	switch {
	case a.Kind == Slowmode:
		delete(b.slowmode, a.Room)
	case a.Room == "":
		delete(b.timeout, a.User)
	default:
		delete(b.inRoom, [2]string{a.User, a.Room})
	}
	if b.peak >= 1024 && len(b.all) <= b.peak/4 {
		kept := b.all
		b.reset()
		for _, a := range kept {
			b.put(a)
		}
	}
}

// changedAt records a change as of revision rev, and wakes whoever waits
// for one (Await); b.mu is held.
func (b *Book) changedAt(rev uint64) {
	b.rev = max(b.rev, rev)
	b.n.Store(int64(len(b.all)))
	close(b.changed)
	b.changed = make(chan struct{})
}

// Await returns once the book holds revision rev (true), or when ctx is
// done first (false).
func (b *Book) Await(ctx context.Context, rev uint64) bool {
	for {
		b.mu.RLock()
		held, changed := b.rev >= rev, b.changed
		b.mu.RUnlock()
		if held {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// Rev is the newest revision of the bucket the book holds: a member that
// asks another to decide with an action it just set says so.
func (b *Book) Rev() uint64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.rev
}

// Lookup is the action kept under key, in force or not.
func (b *Book) Lookup(key string) (Action, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if a, ok := b.all[key]; ok {
		return *a, true
	}
	return Action{}, false
}

// Empty reports whether the book holds no action: most checks' case.
func (b *Book) Empty() bool { return b.n.Load() == 0 }

// Slowmode is room's slow mode in force at now, or nil.
func (b *Book) Slowmode(room string, now int64) *Action {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if a := b.slowmode[room]; a != nil && a.InForce(now) {
		return a
	}
	return nil
}

// Timeout is user's timeout in force at now, in room or everywhere (the
// one that ends later, if both), or nil.
func (b *Book) Timeout(room, user string, now int64) *Action {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var t *Action
	for _, a := range []*Action{b.timeout[user], b.inRoom[[2]string{user, room}]} {
		if a != nil && a.InForce(now) && (t == nil || later(a, t)) {
			t = a
		}
	}
	return t
}

// later reports whether a ends after b.
func later(a, b *Action) bool {
	return a.Until == nil || b.Until != nil && *a.Until > *b.Until
}

// List is every action in force at now, by key; Expired, those that ended
// by now and are still kept.
func (b *Book) List(now int64) (inForce, expired []Action) {
	b.mu.RLock()
	all := make([]*Action, 0, len(b.all))
	for _, a := range b.all {
		all = append(all, a)
	}
	b.mu.RUnlock() // sorted without the lock: the actions are never changed in place
	slices.SortFunc(all, func(x, y *Action) int { return strings.Compare(x.Key(), y.Key()) })
	for _, a := range all {
		if a.InForce(now) {
			inForce = append(inForce, *a)
		} else {
			expired = append(expired, *a)
		}
	}
	return inForce, expired
}
