package throttle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chatpulse/chatpulse/chat"
)

// A Set holds policies and the keyed state they keep. It is fed the stream
// of accepted messages (Observe, or ObserveBatch for many at a time) and
// answers whether one more message would be allowed (Check) and which keys
// are over an enforcing policy (Active). A Set is safe for concurrent use.
//
// Time is Unix milliseconds, as everywhere in chatpulse: a message's
// chat.Event.TS, the now of Check, Active and Sweep, and the chat.Time of
// the answers.
//
// Alerts. Observe first decides each message as Check would at its instant,
// then records it. The first message an enforcing policy denies for a key
// is the crossing: Observe returns an Alert and marks the key; further
// denied messages do not alert, and the next allowed one clears the mark, so
// a key alerts once per crossing. A Set does not know which messages are
// replayed (read again after a restart): it sets and clears the marks of
// every message alike, and ObserveBatch tells which event each alert is of,
// so that the caller drops the alerts of replayed events, which the
// previous run raised already. Then a live message right after replay that
// is still over the limit does not alert again, and Active after a restart
// is what it was before.
//
// The key of a message depends on the policy's scope: the user (room
// empty), the room (user empty), both, or, for group, none (room and user
// both empty: the policy's name is the group). Alerts and Active name keys
// that way. A repeat policy's key also has the text; it keeps 64-bit hashes
// (keyed with a secret of the Set's, saved with its state) of the name and
// of the normalized text, not the strings, so a new key may be taken for
// one of the n it tracks, with a probability below n/2^64: under 1 in 10^14
// at the default cap.
//
// Memory follows the live keys, not the events. A key whose state is back
// at rest (its window empty, its bucket full, its TAT past) is forgotten,
// since that changes no answer: a little at a time as new keys arrive, and
// all at once by Sweep. Each policy also tracks at most WithMaxKeys keys; a
// new key beyond that evicts the least recently observed one even if it is
// not at rest (counted in Stats as Evicted), and with it its alert mark, so
// such a key alerts again if it crosses again.
//
// A Set saves its whole state (AppendState, CopyState) and loads it back
// (LoadState) into a Set of the same policies, which then answers as the
// one saved would have: a restart need not replay every message.
type Set struct {
	policies []*policy
	maxKeys  int  // per policy (WithMaxKeys), which a state must have been saved with
	text     bool // some policy needs the text's hash
	// Some policy's key includes the user, or the room: msg carries its
	// hash.
	byUser, byRoom bool
	// The keyed state, replaced as a whole by LoadState: each call takes
	// it once, and works on it throughout.
	state atomic.Pointer[state]
}

// A state is what a Set keeps: the key of its hashes of names and texts
// (see hashKey), and the store of each policy's keys, in policy order.
type state struct {
	hk     *hashKey
	stores []store
}

type policy struct {
	Policy
	rooms   []glob
	enforce bool
	text    bool // the key includes the text: only messages with text count
	// Decisions of Check, by result.
	allowed, denied, shadowDenied atomic.Uint64
}

func (p *policy) sees(room string) bool {
	if len(p.rooms) == 0 {
		return true
	}
	for i := range p.rooms {
		if p.rooms[i].match(room) {
			return true
		}
	}
	return false
}

// DefaultMaxKeys is the default cap on the keys a Set tracks per policy.
const DefaultMaxKeys = 100_000

// An Option changes how NewSet builds a Set.
type Option func(*options)

type options struct{ maxKeys int }

// WithMaxKeys caps the keys tracked per policy (default DefaultMaxKeys, at
// least 1). A new key beyond the cap evicts the least recently observed one.
func WithMaxKeys(n int) Option { return func(o *options) { o.maxKeys = max(n, 1) } }

// NewSet returns a Set of the policies, which must be valid and have
// distinct names. Their order is the order of decisions in a Result.
func NewSet(policies []Policy, opts ...Option) (*Set, error) {
	o := options{maxKeys: DefaultMaxKeys}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Set{maxKeys: o.maxKeys}
	seen := make(map[string]bool)
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("policy %q: name: defined twice", p.Name)
		}
		seen[p.Name] = true
		p = p.withDefaults()
		p.Rooms = slices.Clone(p.Rooms)
		alg := algorithmNamed(p.Algorithm)
		pol := &policy{Policy: p, enforce: p.Mode == ModeEnforce, text: alg.text}
		for _, g := range p.Rooms {
			cg, _ := compileGlob(g)
			pol.rooms = append(pol.rooms, cg)
		}
		s.policies = append(s.policies, pol)
		s.text = s.text || alg.text
		s.byUser = s.byUser || p.Scope == ScopeUser || p.Scope == ScopeUserInRoom
		s.byRoom = s.byRoom || p.Scope == ScopeRoom || p.Scope == ScopeUserInRoom
	}
	s.state.Store(s.emptyState(newHashKey()))
	return s, nil
}

// emptyState is a state with key hk and no key tracked.
func (s *Set) emptyState(hk *hashKey) *state {
	st := &state{hk: hk}
	for _, p := range s.policies {
		alg := algorithmNamed(p.Algorithm)
		st.stores = append(st.stores, alg.kernel.newStore(p.settings(), p.Scope, alg.text, s.maxKeys, hk))
	}
	return st
}

// Policies returns the Set's policies, defaults filled in.
func (s *Set) Policies() []Policy {
	ps := make([]Policy, len(s.policies))
	for i, p := range s.policies {
		ps[i] = p.Policy
		ps[i].Rooms = slices.Clone(p.Rooms)
	}
	return ps
}

// Observe records one accepted message, at its event time e.TS, as one hit
// for every policy that sees its room (a repeat policy only sees messages
// whose text is not empty once normalized), and returns the alerts for the
// keys it made cross an enforcing policy. See Set for the alert rules.
// Observing a message for keys already tracked does not allocate. To
// observe many messages, ObserveBatch is cheaper.
func (s *Set) Observe(e chat.Event) []Alert {
	st := s.state.Load()
	var m msg
	hasText := s.message(&m, st.hk, e.TS, e.Room, e.User, e.Text)
	var alerts []Alert
	for pi, p := range s.policies {
		if !p.sees(e.Room) || p.text && !hasText {
			continue
		}
		if crossed, count, limit := st.stores[pi].observe(m, p.enforce); crossed {
			alerts = append(alerts, p.alert(&m, count, limit))
		}
	}
	return alerts
}

// A batch is ObserveBatch's scratch, pooled.
type batch struct {
	msgs    [batchChunk]msg
	hasText [batchChunk]bool
	sel     [batchChunk]int32
	cross   []crossing
}

var batches = sync.Pool{New: func() any { return new(batch) }}

// ObserveBatch records events in order, exactly as Observe called for each
// of them in turn would, and calls fn (if not nil) with each alert and the
// index in evs of the event that raised it, in the order those calls would
// have returned them. It is cheaper: a few dozen events at a time, it takes
// each policy's lock once, and looks up their keys together, so that the
// cache misses overlap. It calls fn with no lock held, once the alert's
// event and up to a few dozen after it are recorded. Recording events for
// keys already tracked does not allocate (its scratch space is pooled).
func (s *Set) ObserveBatch(evs []chat.Event, fn func(i int, a Alert)) {
	st := s.state.Load()
	b := batches.Get().(*batch)
	for start := 0; start < len(evs); start += batchChunk {
		chunk := evs[start:min(len(evs), start+batchChunk)]
		for j := range chunk {
			e := &chunk[j]
			b.hasText[j] = s.message(&b.msgs[j], st.hk, e.TS, e.Room, e.User, e.Text)
		}
		ms := b.msgs[:len(chunk)]
		b.cross = b.cross[:0]
		for pi, p := range s.policies {
			sel := b.sel[:0]
			for j := range chunk {
				if p.sees(chunk[j].Room) && (!p.text || b.hasText[j]) {
					sel = append(sel, int32(j))
				}
			}
			if len(sel) == 0 {
				continue
			}
			n := len(b.cross)
			st.stores[pi].observeAll(ms, sel, p.enforce, &b.cross)
			for c := range b.cross[n:] {
				b.cross[n+c].policy = int32(pi)
			}
		}
		// Each policy's crossings are in message order: a stable sort
		// puts them all in the order of Observe's alerts.
		slices.SortStableFunc(b.cross, func(x, y crossing) int { return cmp.Compare(x.j, y.j) })
		if fn != nil {
			for _, c := range b.cross {
				fn(start+int(c.j), s.policies[c.policy].alert(&ms[c.j], c.count, c.limit))
			}
		}
		clear(ms) // keep none of the caller's strings in the pool
	}
	batches.Put(b)
}

// message sets m to a message as the tables see it, its hashes with key
// hk, and reports whether it has a text that is not empty once normalized
// (only if a policy needs one).
func (s *Set) message(m *msg, hk *hashKey, at int64, room, user, text string) bool {
	*m = msg{at: at, room: room, user: user}
	hasText := false
	if s.text {
		m.text, hasText = hk.textHash(text)
	}
	if s.byUser {
		m.userHash = hk.nameHash(user)
	}
	if s.byRoom {
		m.roomHash = hk.nameHash(room)
	}
	return hasText
}

// alert is the Alert of a crossing of m's key, with the count and limit of
// the key's verdict.
func (p *policy) alert(m *msg, count, limit int64) Alert {
	r, u := keyOf(p.Scope, m.room, m.user)
	return Alert{Policy: p.Name, Room: strings.Clone(r), User: strings.Clone(u), Count: count, Limit: limit, At: chat.Time(m.at)}
}

// Check answers whether one more message from user in room would be allowed
// at now, with text if hasText. A repeat policy takes part only when the
// check carries a text that is not empty once normalized. Check changes no
// state that any later answer depends on; it only counts its decisions for
// Stats.
func (s *Set) Check(now int64, room, user, text string, hasText bool) Result {
	if !hasText {
		text = ""
	}
	st := s.state.Load()
	var m msg
	hasText = s.message(&m, st.hk, now, room, user, text)
	res := Result{Allowed: true, AsOf: chat.Time(now), Room: strings.Clone(room), User: strings.Clone(user), Decisions: []Decision{}}
	for pi, p := range s.policies {
		if !p.sees(room) || p.text && !hasText {
			continue
		}
		v := st.stores[pi].check(m)
		switch {
		case v.Allowed:
			p.allowed.Add(1)
		case p.enforce:
			p.denied.Add(1)
			res.Allowed = false
		default:
			p.shadowDenied.Add(1)
		}
		res.Decisions = append(res.Decisions, Decision{
			Policy: p.Name, Scope: p.Scope, Algorithm: p.Algorithm, Mode: p.Mode,
			Allowed: v.Allowed, Count: v.Count, Limit: v.Limit, Remaining: v.Remaining,
			RetryAfterMs: v.RetryAfter.Milliseconds(),
		})
	}
	return res
}

// Active returns the keys over an enforcing policy at now, by policy order,
// then room, then user. A key of a repeat policy is listed once however
// many of its texts are over, with the highest count and earliest Since.
func (s *Set) Active(now int64) []Active {
	st := s.state.Load()
	out := []Active{}
	for pi, p := range s.policies {
		if !p.enforce {
			continue
		}
		start := len(out)
		st.stores[pi].active(now, func(room, user string, v Verdict, since int64) {
			out = append(out, Active{Policy: p.Name, Room: room, User: user, Count: v.Count, Limit: v.Limit, Since: chat.Time(since)})
		})
		part := out[start:]
		slices.SortFunc(part, func(a, b Active) int {
			return cmp.Or(strings.Compare(a.Room, b.Room), strings.Compare(a.User, b.User), cmp.Compare(a.Since, b.Since))
		})
		// Merge the texts of one repeat key: sorted, so they are adjacent.
		merged := part[:0]
		for _, a := range part {
			if n := len(merged); n > 0 && merged[n-1].Room == a.Room && merged[n-1].User == a.User {
				merged[n-1].Count = max(merged[n-1].Count, a.Count)
				continue
			}
			merged = append(merged, a)
		}
		out = out[:start+len(merged)]
	}
	return out
}

// Sweep forgets every key whose state is back at rest at now, as if it had
// never been seen, and returns how many. Observe already does this a little
// at a time; calling Sweep now and then (say, every window) also frees the
// keys of traffic that stopped.
func (s *Set) Sweep(now int64) int {
	n := 0
	for _, store := range s.state.Load().stores {
		n += store.sweep(now)
	}
	return n
}

// PolicyStats are a policy's counters since the Set was made.
type PolicyStats struct {
	Policy string
	// Decisions of Check, by result.
	Allowed, Denied, ShadowDenied uint64
	// Keys is the number of keys tracked now.
	Keys int
	// Evicted counts keys forgotten because of the cap (WithMaxKeys) before
	// they were at rest; Expired, keys forgotten at rest (no answer changes).
	Evicted, Expired uint64
}

// Stats returns each policy's counters, in policy order.
func (s *Set) Stats() []PolicyStats {
	st := s.state.Load()
	out := make([]PolicyStats, len(s.policies))
	for i, p := range s.policies {
		keys, evicted, expired := st.stores[i].stats()
		out[i] = PolicyStats{
			Policy: p.Name, Allowed: p.allowed.Load(), Denied: p.denied.Load(), ShadowDenied: p.shadowDenied.Load(),
			Keys: keys, Evicted: evicted, Expired: expired,
		}
	}
	return out
}

// A DecisionLabel is one (policy, result) pair that Check can count.
type DecisionLabel struct{ Policy, Result string }

// DecisionLabels returns every (policy, result) pair Stats can count, known
// before any decision, so that metrics can be exported at 0 from the start:
// allowed and denied for an enforcing policy, allowed and shadow_denied for
// a shadow one.
func (s *Set) DecisionLabels() []DecisionLabel {
	var out []DecisionLabel
	for _, p := range s.policies {
		no := ResultDenied
		if !p.enforce {
			no = ResultShadowDenied
		}
		out = append(out, DecisionLabel{p.Name, ResultAllowed}, DecisionLabel{p.Name, no})
	}
	return out
}
