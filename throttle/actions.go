package throttle

import (
	"slices"
	"strings"
	"sync"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/moderation"
)

// A Query is what a check asks about: one more message from User in Room,
// with Text if HasText, sent by someone the chat server says has Roles
// (docs/contract.md section 11: roles are the caller's word, so only an
// authorised caller should send them).
//
// A consuming check may ask about a join instead (Kind chat.KindJoin):
// one more join of User to Room, which only the room's join waves that
// lock it decide (see Consume).
type Query struct {
	Room, User string
	Text       string
	HasText    bool
	// Mentions are the users the message mentions (docs/contract.md
	// section 15): with its text, what it costs.
	Mentions []string
	Roles    []string
	// Kind is chat.KindMessage (the zero value) or, for Consume only,
	// chat.KindJoin.
	Kind chat.Kind
}

// The names of the decisions of moderators' actions (docs/contract.md
// section 11): each is the Decision's policy and algorithm.
const (
	ActionSlowmode = "slowmode"
	ActionTimeout  = "timeout"
)

// Moderate makes the Set decide with the moderators' actions of book
// (nil: none): every check is denied while its user is timed out, and in
// a room under slow mode each user may post once per interval, which the
// Set learns from the messages it observes and the consuming checks it
// allows. A group gives the book to the sets of its room stages, which see
// every message of their rooms.
func (s *Set) Moderate(book *moderation.Book) { s.book.Store(book) }

// slowPosts are the instants of the last messages of users in rooms under
// slow mode, for as long as an interval can still deny them, and for at
// most maxKeys (room, user) pairs: a pair not kept (more users posting in
// rooms under slow mode within a day than the cap) may post again at once.
// They are saved in the state (setstate.go).
type slowPosts struct {
	mu   sync.Mutex
	last map[[2]string]int64 // room, user
}

// post records a message of user in room at `at`, if the room is under
// slow mode then.
//
// It returns when the user may post there again, if slow mode would have
// denied this message (0 if not): a post within the interval of their
// last, by a user slow mode does not exempt.
func (s *Set) slowPost(book *moderation.Book, room, user string, at int64) (denied int64) {
	a := book.Slowmode(room, at)
	if a == nil {
		return 0
	}
	s.slow.mu.Lock()
	defer s.slow.mu.Unlock()
	if s.slow.last == nil {
		s.slow.last = map[[2]string]int64{}
	}
	k := [2]string{room, user}
	t, ok := s.slow.last[k]
	if ok && at-t < a.Interval && !moderation.Exempts(a.ExemptUsers, a.ExemptRoles, user, nil) {
		denied = t + a.Interval
	}
	switch {
	case ok && at > t:
		s.slow.last[k] = at
	case !ok && len(s.slow.last) < s.maxKeys:
		s.slow.last[[2]string{strings.Clone(room), strings.Clone(user)}] = at
	}
	return denied
}

// sweepSlow forgets the posts that no slow mode can deny any more.
func (s *Set) sweepSlow(now int64) {
	s.slow.mu.Lock()
	defer s.slow.mu.Unlock()
	for k, t := range s.slow.last {
		if t <= now-moderation.MaxInterval.Milliseconds() {
			delete(s.slow.last, k)
		}
	}
}

// actions appends to out the decisions of the actions in force for q at
// now, first in a Result: a timeout, then slow mode.
func (s *Set) actions(out []Decision, now int64, q *Query) []Decision {
	book := s.book.Load()
	if book == nil || book.Empty() {
		return out
	}
	if a := book.Timeout(q.Room, q.User, now); a != nil {
		d := Decision{Policy: ActionTimeout, Scope: ScopeUser, Algorithm: ActionTimeout, Mode: ModeEnforce}
		if a.Room != "" {
			d.Scope = ScopeUserInRoom
		}
		out = append(out, actionDecision(d, a, q, now, 0))
	}
	if a := book.Slowmode(q.Room, now); a != nil {
		d := Decision{Policy: ActionSlowmode, Scope: ScopeUserInRoom, Algorithm: ActionSlowmode, Mode: ModeEnforce, Limit: 1}
		s.slow.mu.Lock()
		last, posted := s.slow.last[[2]string{q.Room, q.User}]
		s.slow.mu.Unlock()
		free := int64(0) // when one more message is allowed; 0: now
		if posted && now < last+a.Interval {
			d.Count, free = 1, last+a.Interval
		}
		out = append(out, actionDecision(d, a, q, now, free))
	}
	return out
}

// actionDecision completes d, the decision of action a: exempt, denied
// until the action ends (a timeout: free 0) or until free (slow mode), or
// allowed.
func actionDecision(d Decision, a *moderation.Action, q *Query, now, free int64) Decision {
	switch {
	case moderation.Exempts(a.ExemptUsers, a.ExemptRoles, q.User, q.Roles):
		d.Allowed, d.Exempt = true, true
	case d.Policy == ActionTimeout:
		if a.Until != nil {
			d.RetryAfterMs = int64(*a.Until) - now
			d.Until = a.Until
		}
	case free > now:
		d.RetryAfterMs = free - now
		if a.Until != nil && int64(*a.Until) < free { // the slow mode ends first
			d.RetryAfterMs = int64(*a.Until) - now
		}
	default:
		d.Allowed = true
	}
	if d.Allowed {
		d.Remaining = d.Limit - d.Count
	}
	return d
}

// exempt reports whether q is exempt from policy p.
func (p *policy) exempt(q *Query) bool {
	for _, r := range q.Roles {
		if slices.Contains(p.ExemptRoles, r) {
			return true
		}
	}
	for i := range p.exempts {
		if p.exempts[i].Match(q.User) {
			return true
		}
	}
	return false
}

// ActionsActive lists the actions in force at now as Active entries, for
// GET /api/v1/throttle/active: since when they are set, until when.
func ActionsActive(book *moderation.Book, now int64) []Active {
	if book == nil {
		return nil
	}
	inForce, _ := book.List(now)
	out := make([]Active, 0, len(inForce))
	for _, a := range inForce {
		out = append(out, Active{Policy: string(a.Kind), Room: a.Room, User: a.User, Since: a.Set, Until: a.Until})
	}
	return out
}
