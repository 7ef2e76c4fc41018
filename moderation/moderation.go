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

// A Book holds the actions in force, for checks to read without a lock:
// each change makes a new index and swaps it in whole.
type Book struct {
	idx atomic.Pointer[index]
}

type index struct {
	rev      uint64            // the newest revision of the bucket it holds
	replaced chan struct{}     // closed when the next index replaces it
	all      map[string]Action // by key
	slowmode map[string]*Action
	timeout  map[string]*Action // by user: everywhere
	inRoom   map[[2]string]*Action
}

// NewBook returns an empty book.
func NewBook() *Book {
	b := &Book{}
	b.idx.Store(buildIndex(map[string]Action{}))
	return b
}

func buildIndex(all map[string]Action) *index {
	x := &index{all: all, replaced: make(chan struct{}), slowmode: map[string]*Action{}, timeout: map[string]*Action{}, inRoom: map[[2]string]*Action{}}
	for k := range all {
		a := all[k]
		switch {
		case a.Kind == Slowmode:
			x.slowmode[a.Room] = &a
		case a.Room == "":
			x.timeout[a.User] = &a
		default:
			x.inRoom[[2]string{a.User, a.Room}] = &a
		}
	}
	return x
}

// Put keeps a (valid) in the book, replacing the action of its key, as of
// revision rev of the bucket (0: none); Delete forgets the action of key.
// A book changes by one writer at a time (the watch of the bucket, and
// the writes of this instance's moderators, under the same lock).
func (b *Book) Put(a Action, rev uint64) { b.change(a.Key(), &a, rev) }

// Delete forgets the action kept under key, as of revision rev.
func (b *Book) Delete(key string, rev uint64) { b.change(key, nil, rev) }

func (b *Book) change(key string, a *Action, rev uint64) {
	old := b.idx.Load()
	all := make(map[string]Action, len(old.all)+1)
	for k, v := range old.all {
		if k != key {
			all[k] = v
		}
	}
	if a != nil {
		all[key] = *a
	}
	b.swap(old, all, rev)
}

// PutAll keeps every action of as in the book at once, as of revision rev:
// how the actions kept in the bucket are read at start, in one step, not
// one index a key.
func (b *Book) PutAll(as []Action, rev uint64) {
	old := b.idx.Load()
	all := make(map[string]Action, len(old.all)+len(as))
	for k, v := range old.all {
		all[k] = v
	}
	for _, a := range as {
		all[a.Key()] = a
	}
	b.swap(old, all, rev)
}

// swap replaces the index old with one of all, as of revision rev, and
// wakes whoever waits for a revision (Await).
func (b *Book) swap(old *index, all map[string]Action, rev uint64) {
	x := buildIndex(all)
	x.rev = max(old.rev, rev)
	b.idx.Store(x)
	close(old.replaced)
}

// Await returns once the book holds revision rev (true), or when ctx is
// done first (false).
func (b *Book) Await(ctx context.Context, rev uint64) bool {
	for {
		x := b.idx.Load()
		if x.rev >= rev {
			return true
		}
		select {
		case <-x.replaced:
		case <-ctx.Done():
			return false
		}
	}
}

// Rev is the newest revision of the bucket the book holds: a member that
// asks another to decide with an action it just set says so.
func (b *Book) Rev() uint64 { return b.idx.Load().rev }

// Lookup is the action kept under key, in force or not.
func (b *Book) Lookup(key string) (Action, bool) {
	a, ok := b.idx.Load().all[key]
	return a, ok
}

// Empty reports whether the book holds no action: most checks' case.
func (b *Book) Empty() bool { return len(b.idx.Load().all) == 0 }

// Slowmode is room's slow mode in force at now, or nil.
func (b *Book) Slowmode(room string, now int64) *Action {
	if a := b.idx.Load().slowmode[room]; a != nil && a.InForce(now) {
		return a
	}
	return nil
}

// Timeout is user's timeout in force at now, in room or everywhere (the
// one that ends later, if both), or nil.
func (b *Book) Timeout(room, user string, now int64) *Action {
	x := b.idx.Load()
	var t *Action
	for _, a := range []*Action{x.timeout[user], x.inRoom[[2]string{user, room}]} {
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
	x := b.idx.Load()
	for _, k := range slicesSorted(x.all) {
		if a := x.all[k]; a.InForce(now) {
			inForce = append(inForce, a)
		} else {
			expired = append(expired, a)
		}
	}
	return inForce, expired
}

func slicesSorted(m map[string]Action) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
