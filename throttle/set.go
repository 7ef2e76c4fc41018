package throttle

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/measure"
	"github.com/chatpulse/chatpulse/moderation"
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
// new key beyond that evicts one of the least recently observed even if it
// is not at rest (counted in Stats as Evicted): one that at least half the
// keys tracked were observed after. With it goes its alert mark, so such a
// key alerts again if it crosses again.
//
// A Set saves its whole state (AppendState, CopyState) and loads it back
// (LoadState) into a Set of the same policies, which then answers as the
// one saved would have: a restart need not replay every message. Its
// policies change while it runs (Reconfigure), keeping the keys of those
// whose state means the same under the new settings.
type Set struct {
	maxKeys int // per policy (WithMaxKeys), which a state must have been saved with
	// swap is held for reading by each call that records messages in the
	// state (Observe, ObserveBatch, Sweep), and for writing by the calls
	// that replace it (Reconfigure, LoadState), so that no message is
	// recorded in a state already replaced, and lost. The calls that only
	// read (Check, Active, Stats, AppendState) do not take it: each loads
	// the state once and answers from it, and a state once replaced stays
	// as it was, so such a call that runs meanwhile answers from the old
	// state or the new one, whole.
	swap  sync.RWMutex
	state atomic.Pointer[state]
	// consuming: a consuming check has come, so the messages observed
	// carry the hashes of their ids (Consume).
	consuming atomic.Bool
	consumed  atomic.Uint64 // consuming checks recorded
	// book: the moderators' actions it decides with (Moderate); slow,
	// the last posts in rooms under slow mode.
	book  atomic.Pointer[moderation.Book]
	slow  slowPosts
	first firstPosts // for the policies with NewMembers
}

// A state is what a Set decides with: its policies, the key of its hashes
// of names and texts (see hashKey), and the store of each policy's keys, in
// policy order. A Set replaces its state as a whole, never changes one.
type state struct {
	rules
	hk     *hashKey
	stores []store
}

// DefaultMaxKeys is the default cap on the keys a Set tracks per policy.
const DefaultMaxKeys = 100_000

// An Option changes how NewSet builds a Set.
type Option func(*options)

type options struct{ maxKeys int }

// WithMaxKeys caps the keys tracked per policy (default DefaultMaxKeys, at
// least 1). A new key beyond the cap evicts one of the least recently
// observed (see Set).
func WithMaxKeys(n int) Option { return func(o *options) { o.maxKeys = max(n, 1) } }

// NewSet returns a Set of the policies, which must be valid and have
// distinct names. Their order is the order of decisions in a Result.
func NewSet(policies []Policy, opts ...Option) (*Set, error) {
	o := options{maxKeys: DefaultMaxKeys}
	for _, opt := range opts {
		opt(&o)
	}
	r, err := newRules(policies)
	if err != nil {
		return nil, err
	}
	s := &Set{maxKeys: o.maxKeys}
	s.state.Store(s.emptyState(r, newHashKey()))
	return s, nil
}

// emptyState is a state of rules r with key hk and no key tracked.
func (s *Set) emptyState(r rules, hk *hashKey) *state {
	st := &state{rules: r, hk: hk}
	for _, p := range r.policies {
		st.stores = append(st.stores, s.emptyStore(p, hk))
	}
	return st
}

// emptyStore is the store of policy p with key hk and no key tracked.
func (s *Set) emptyStore(p *policy, hk *hashKey) store {
	alg := algorithmNamed(p.Algorithm)
	st := alg.kernel.newStore(p.settings(), p.Scope, alg.text, s.maxKeys, hk)
	st.setRule(extraRuleOf(p))
	return st
}

// Policies returns the policies in force, defaults filled in, in the order
// of decisions.
func (s *Set) Policies() []Policy {
	st := s.state.Load()
	ps := make([]Policy, len(st.policies))
	for i, p := range st.policies {
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
	s.swap.RLock()
	defer s.swap.RUnlock()
	st := s.state.Load()
	var m msg
	hasText := st.message(&m, &e)
	if e.ID != "" && s.consuming.Load() {
		m.id = st.hk.idHash(e.ID)
	}
	var alerts []Alert
	for pi, p := range st.policies {
		if !p.counts(&e, hasText) {
			continue
		}
		if c := st.stores[pi].observe(m, p.enforce); c.j >= 0 && !c.again {
			alerts = append(alerts, p.alert(e.TS, e.Room, e.User, e.ID, c))
		}
	}
	s.posted(st, &e)
	return alerts
}

// counts reports whether policy p counts event e: a join wave its joins,
// every other policy its messages (with text, for a repeat policy), in the
// rooms it sees. A leave counts in none.
func (p *policy) counts(e *chat.Event, hasText bool) bool {
	if p.joins {
		return e.Kind == chat.KindJoin && p.sees(e.Room)
	}
	return e.Kind == chat.KindMessage && p.sees(e.Room) && (!p.text || hasText)
}

// posted notes what e tells beside the policies' counts: a post in a room
// under slow mode, a user seen in a room (by a message or a join; a
// repeated join, chat.KindRepeat, shows nobody new). It returns when the
// user may post again if slow mode would have denied e (0 if not).
func (s *Set) posted(st *state, e *chat.Event) (slowDenied int64) {
	if e.Kind == chat.KindMessage {
		if book := s.book.Load(); book != nil && !book.Empty() {
			slowDenied = s.slowPost(book, e.Room, e.User, e.TS)
		}
	}
	if st.newMembers > 0 && (e.Kind == chat.KindMessage || e.Kind == chat.KindJoin) {
		s.seen(e.Room, e.User, e.TS)
	}
	return slowDenied
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
// cache misses overlap. It calls fn once every event is recorded, with no
// lock held. Recording events for keys already tracked does not allocate
// (its scratch space is pooled).
//
// over (if not nil) is called, in the same turn, with each message over a
// policy that acts (Over): its crossing, right after the crossing's alert,
// and each later message of the marked key; and with each message slow
// mode would have denied, which is redacted (docs/contract.md section 14).
func (s *Set) ObserveBatch(evs []chat.Event, fn func(i int, a Alert), over func(i int, o Over)) {
	b := batches.Get().(*batch)
	b.cross = b.cross[:0]
	st := s.observeAll(evs, b)
	for i := range evs {
		if until := s.posted(st, &evs[i]); until != 0 && over != nil {
			over(i, slowOver(&evs[i], until))
		}
	}
	for _, c := range b.cross {
		e, p := &evs[c.j], st.policies[c.policy]
		if fn != nil && !c.again {
			fn(c.j, p.alert(e.TS, e.Room, e.User, e.ID, c))
		}
		if over != nil && len(p.Act) > 0 && p.enforce {
			over(c.j, p.over(e, c))
		}
	}
	batches.Put(b)
}

// observeAll records evs and appends their crossings to b.cross, in the
// order of Observe's alerts, and returns the state it recorded them in.
func (s *Set) observeAll(evs []chat.Event, b *batch) *state {
	s.swap.RLock()
	defer s.swap.RUnlock()
	st := s.state.Load()
	ids := s.consuming.Load()
	for start := 0; start < len(evs); start += batchChunk {
		chunk := evs[start:min(len(evs), start+batchChunk)]
		for j := range chunk {
			e := &chunk[j]
			b.hasText[j] = st.message(&b.msgs[j], e)
			if ids && e.ID != "" {
				b.msgs[j].id = st.hk.idHash(e.ID)
			}
		}
		ms := b.msgs[:len(chunk)]
		first := len(b.cross)
		for pi, p := range st.policies {
			sel := b.sel[:0]
			for j := range chunk {
				if p.counts(&chunk[j], b.hasText[j]) {
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
				b.cross[n+c].j += start
			}
		}
		// Each policy's crossings are in message order: a stable sort
		// puts them all in the order of Observe's alerts.
		slices.SortStableFunc(b.cross[first:], func(x, y crossing) int { return cmp.Compare(x.j, y.j) })
		clear(ms) // keep none of the caller's strings in the pool
	}
	return st
}

// message sets m to message e as the tables see it, its hashes with the
// state's key, and reports whether it has a text that is not empty once
// normalized (only if a policy needs one).
func (st *state) message(m *msg, e *chat.Event) bool {
	return st.messageOf(m, e.TS, e.Room, e.User, e.Text, e.Mentions)
}

// messageOf is message of a message at `at` from user in room, with text
// that mentions mentions: what it carries is counted if a policy's cost
// weighs it.
func (st *state) messageOf(m *msg, at int64, room, user, text string, mentions []string) bool {
	*m = msg{at: at, room: room, user: user, body: text}
	if st.what != 0 {
		m.counts = measure.Of(text, mentions, st.what)
	}
	hasText := false
	if st.text {
		m.text, hasText = st.hk.textHash(text)
	}
	if st.byUser {
		m.userHash = st.hk.nameHash(user)
	}
	if st.byRoom {
		m.roomHash = st.hk.nameHash(room)
	}
	return hasText
}

// alert is the Alert of a crossing, by the message (id event) at `at`
// from user in room, with the count and limit of the key's verdict and
// the end of the penalty it started.
func (p *policy) alert(at int64, room, user, event string, c crossing) Alert {
	r, u := keyOf(p.Scope, room, user)
	a := Alert{Policy: p.Name, Room: strings.Clone(r), User: strings.Clone(u), Count: c.count, Limit: c.limit, At: chat.Time(at), Event: strings.Clone(event), Cost: c.cost, Spike: c.spike}
	if c.until != 0 {
		until := chat.Time(c.until)
		a.Until = &until
	}
	return a
}

// Check is Decide of a query without roles.
func (s *Set) Check(now int64, room, user, text string, hasText bool) Result {
	return s.Decide(now, Query{Room: room, User: user, Text: text, HasText: hasText})
}

// Decide answers whether one more message of q would be allowed at now:
// the moderators' actions in force first (Moderate), then each policy that
// sees its room, in order. A repeat policy takes part only when the check
// carries a text that is not empty once normalized; a policy or action
// that exempts q's user or roles allows it, and says so. Decide changes no
// state that any later answer depends on; it only counts its decisions for
// Stats.
func (s *Set) Decide(now int64, q Query) Result {
	if !q.HasText {
		q.Text = ""
	}
	st := s.state.Load()
	var m msg
	hasText := st.messageOf(&m, now, q.Room, q.User, q.Text, q.Mentions)
	res := Result{Allowed: true, AsOf: chat.Time(now), Room: strings.Clone(q.Room), User: strings.Clone(q.User), Decisions: s.actions(make([]Decision, 0, len(st.policies)), now, &q)}
	for _, d := range res.Decisions {
		res.Allowed = res.Allowed && d.Allowed
	}
	for pi, p := range st.policies {
		if !p.sees(q.Room) || p.text && !hasText || p.similar && !q.HasText || !s.applies(st, p, &q, m, now) {
			continue
		}
		v := st.stores[pi].check(m)
		if p.exempt(&q) {
			v.Allowed, v.RetryAfter = true, 0
		} else if !v.Allowed && p.enforce {
			res.Allowed = false
		}
		d := p.decide(v)
		d.Exempt = p.exempt(&q)
		res.Decisions = append(res.Decisions, d)
	}
	return res
}

// Active returns the keys over an enforcing policy at now, by policy order,
// then room, then user. A key of a repeat policy is listed once however
// many of its texts are over, with the highest count and earliest Since.
// A key of a room the policy no longer sees (Reconfigure) is not listed.
func (s *Set) Active(now int64) []Active {
	st := s.state.Load()
	out := []Active{}
	for pi, p := range st.policies {
		if !p.enforce {
			continue
		}
		start := len(out)
		byRoom := p.Scope == ScopeRoom || p.Scope == ScopeUserInRoom
		st.stores[pi].active(now, func(room, user string, v Verdict, since, until int64) {
			if !byRoom || p.sees(room) {
				a := Active{Policy: p.Name, Room: room, User: user, Count: v.Count, Limit: v.Limit, Since: chat.Time(since), Spike: v.spike}
				if until != 0 {
					u := chat.Time(until)
					a.Until = &u
				}
				out = append(out, a)
			}
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
	s.swap.RLock()
	defer s.swap.RUnlock()
	st := s.state.Load()
	n := 0
	for _, store := range st.stores {
		n += store.sweep(now)
	}
	s.sweepSlow(now)
	s.sweepFirst(now, st.newMembers)
	return n
}
