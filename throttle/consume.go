package throttle

import (
	"strings"

	"github.com/chatpulse/chatpulse/chat"
)

// Consuming checks (docs/contract.md section 10): a check that decides and,
// when allowed, counts the message in the same step, so that a burst of
// checks sent at once is held to the limit however it is spread. A Set
// takes the lock of every policy that sees the message, in policy order
// (every call that takes more than one does it in that order, so none
// waits for another in a cycle), decides each, and records the message as
// one hit of every one of them only if no enforcing policy denies it. The
// id the message's event will carry is remembered with each hit, for the
// policy's window, so that the event counts once: by the check.

// consumer is what a store does for consuming checks. lock and unlock
// take and give back the store's lock; the methods between them run with
// it held.
type consumer interface {
	lock()
	unlock()
	// counted reports whether the key of m counted a hit with m's id
	// within the window: an earlier consuming check's, or an event's that
	// came first.
	counted(m msg) bool
	// verdict is check's, with the lock held.
	verdict(m msg) Verdict
	// refuse records a denied consuming check: nothing is counted, but it
	// is the key's crossing if the key was allowed before (marked if mark),
	// with the penalty that starts.
	refuse(m msg, mark bool) crossing
	// take records an allowed consuming check: one hit, remembered with
	// its id.
	take(m msg)
	// untake takes back what take recorded for m's id (it takes the lock),
	// and reports whether there was one.
	untake(m msg) bool
}

func (t *table[S, E, K]) lock()   { t.mu.Lock() }
func (t *table[S, E, K]) unlock() { t.mu.Unlock() }

func (t *table[S, E, K]) counted(m msg) bool {
	var k key
	t.keyOf(&m, &k)
	i := t.find(&k)
	if i == none {
		return false
	}
	x := t.extraAt(i)
	return x != nil && x.counted(m.id, m.at, t.rule.window, false)
}

func (t *table[S, E, K]) verdict(m msg) Verdict {
	var k key
	t.keyOf(&m, &k)
	cost := t.price.of(&m)
	if i := t.find(&k); i != none {
		return t.verdictAt(i, m.at, cost)
	}
	return decideCost(t.k, &t.fresh, t.zero, m.at, cost)
}

func (t *table[S, E, K]) refuse(m msg, mark bool) crossing {
	var k key
	t.keyOf(&m, &k)
	i := t.find(&k)
	if i == none {
		i = t.insert(&k, m.at)
	}
	t.touch(i)
	if !mark || t.states[i].since != chat.Never {
		return crossing{j: -1}
	}
	return t.cross(i, &m)
}

func (t *table[S, E, K]) take(m msg) {
	t.ids = true
	cost := t.price.of(&m)
	if cost == 0 {
		return // nothing to count, nor to take back
	}
	var k key
	t.keyOf(&m, &k)
	i := t.find(&k)
	if i == none {
		i = t.insert(&k, m.at)
	}
	e := &t.states[i]
	t.extraOf(i).remember(idHit{id: m.id, at: m.at, since: e.since, consumed: true, cost: cost}, &t.rule)
	t.k.hit(&e.st, t.extOf(i), m.at, cost)
	e.since = chat.Never // allowed
	t.touch(i)
}

func (t *table[S, E, K]) untake(m msg) bool {
	var k key
	t.keyOf(&m, &k)
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.find(&k)
	if i == none {
		return false
	}
	x := t.extraAt(i)
	if x == nil {
		return false
	}
	h, ok := x.forget(m.id)
	if !ok {
		return false
	}
	e := &t.states[i]
	t.k.unhit(&e.st, t.extOf(i), h.at, h.cost)
	if e.since == chat.Never {
		e.since = h.since
	}
	return true
}

// Consume answers as Decide does and, if nothing that is enforced denies
// (a moderator's action, or a policy), records the message as one hit of
// every policy that sees it and does not exempt it (shadow ones too),
// remembering id with each, atomically with respect to every other call
// for the same keys: of n consuming checks of one key at once, exactly as
// many are allowed as the policies allow. A slow mode records the post.
// The answer's Consumed says whether the message is counted by the check
// (now or before); recorded, whether this call recorded it.
//
// The event that later arrives with the same id is not counted again by
// those policies (within each one's window). A consuming check whose id
// the keys have counted already (the same check sent twice, or its event
// that came first) records nothing and is answered as allowed and
// consumed, as the first one was. A denied one records nothing, except
// what a crossing records: the key's alert mark and its penalty; the
// alerts of those crossings are returned, for the caller to publish.
//
// A join (q.Kind chat.KindJoin) is decided and recorded the same way by
// the join waves of its room that lock it (act: [lock]), and by nothing
// else: not by the moderators' actions, which are about messages, nor by
// the join waves that only alert, which count the joins that arrive on
// the bus. Such a policy keeps its room denied for lock_for after its
// crossing (its penalty): the join that would cross is refused, and so is
// every later one until the lock ends. Any other kind is decided by
// nothing, and allowed.
//
// id must not be empty.
func (s *Set) Consume(now int64, q Query, id string) (res Result, recorded bool, alerts []Alert) {
	if !q.HasText || q.Kind != chat.KindMessage {
		q.Text, q.HasText = "", false
	}
	s.consuming.Store(true)
	s.swap.RLock()
	defer s.swap.RUnlock()
	st := s.state.Load()
	var m msg
	hasText := st.messageOf(&m, now, q.Room, q.User, q.Text, q.Mentions)
	m.id = st.hk.idHash(id)
	sel := make([]int, 0, len(st.policies))
	for pi, p := range st.policies {
		if s.consumes(st, p, &q, hasText, m, now) {
			sel = append(sel, pi)
		}
	}
	for _, pi := range sel { // the join waves' locks, which applies takes, are not held here
		st.stores[pi].lock()
	}
	defer func() {
		for _, pi := range sel {
			st.stores[pi].unlock()
		}
	}()
	res = Result{Allowed: true, AsOf: chat.Time(now), Room: strings.Clone(q.Room), User: strings.Clone(q.User), Decisions: make([]Decision, 0, len(sel))}
	if q.Kind == chat.KindMessage {
		res.Decisions = s.actions(res.Decisions, now, &q)
	}
	again := false
	for _, pi := range sel {
		again = again || !st.policies[pi].exempt(&q) && st.stores[pi].counted(m)
	}
	if again { // counted before: answered as the first was
		for i := range res.Decisions {
			res.Decisions[i].Allowed, res.Decisions[i].RetryAfterMs = true, 0
		}
	}
	for _, d := range res.Decisions {
		res.Allowed = res.Allowed && d.Allowed
	}
	var few [8]Verdict
	verdicts := few[:0]
	if len(sel) > len(few) {
		verdicts = make([]Verdict, 0, len(sel))
	}
	verdicts = verdicts[:len(sel)]
	for n, pi := range sel {
		verdicts[n] = st.stores[pi].verdict(m)
		if again || st.policies[pi].exempt(&q) {
			verdicts[n].Allowed, verdicts[n].RetryAfter = true, 0
		}
		if !verdicts[n].Allowed && st.policies[pi].enforce {
			res.Allowed = false
		}
	}
	for n, pi := range sel {
		p, v := st.policies[pi], verdicts[n]
		switch {
		case again:
		case p.exempt(&q):
		case res.Allowed:
			st.stores[pi].take(m)
			recorded = true
		case !v.Allowed:
			if c := st.stores[pi].refuse(m, p.enforce); c.j >= 0 {
				alerts = append(alerts, p.alert(now, q.Room, q.User, id, c))
				v = st.stores[pi].verdict(m) // with the penalty that starts
			}
		}
		if p.spike { // in no decision, as in Decide
			continue
		}
		d := p.decide(v)
		d.Exempt = p.exempt(&q)
		res.Decisions = append(res.Decisions, d)
	}
	if res.Allowed && !again {
		s.posted(st, &chat.Event{Room: q.Room, User: q.User, TS: now, Kind: q.Kind})
	}
	consumed := res.Allowed
	res.Consumed = &consumed
	if recorded {
		s.consumed.Add(1)
	}
	return res, recorded, alerts
}

// consumes reports whether policy p decides and records the consuming
// check q: for a message, every policy that decides it (as Decide's) and
// the spikes of its room, which record it only; for a join, the join
// waves of its room that lock it.
func (s *Set) consumes(st *state, p *policy, q *Query, hasText bool, m msg, now int64) bool {
	switch q.Kind {
	case chat.KindMessage:
		if p.spike { // decides nothing, but counts the message
			return p.sees(q.Room)
		}
		return p.sees(q.Room) && (!p.text || hasText) && (!p.similar || q.HasText) && s.applies(st, p, q, m, now)
	case chat.KindJoin:
		return p.joins && p.Acts(ActLock) && p.sees(q.Room)
	}
	return false
}

// Consumed is how many consuming checks the Set has recorded: a state
// changes with them too, not only with the messages observed.
func (s *Set) Consumed() uint64 { return s.consumed.Load() }

// Unconsume takes back what Consume recorded for id with the same query:
// a group asks it of the stages that allowed a consuming check that
// another stage denied. It reports whether anything was taken back. (A
// slow mode's post is not taken back: the next message waits an interval
// more than it would have, at most.)
func (s *Set) Unconsume(q Query, id string) bool {
	if !q.HasText || q.Kind != chat.KindMessage {
		q.Text, q.HasText = "", false
	}
	s.swap.RLock()
	defer s.swap.RUnlock()
	st := s.state.Load()
	var m msg
	hasText := st.messageOf(&m, 0, q.Room, q.User, q.Text, q.Mentions)
	m.id = st.hk.idHash(id)
	taken := false
	for pi, p := range st.policies {
		if p.joins == (q.Kind == chat.KindJoin) && p.sees(q.Room) && (!p.text || hasText) && (!p.similar || q.HasText) {
			taken = st.stores[pi].untake(m) || taken
		}
	}
	return taken
}

// decide is a policy's Decision for a verdict, counted for Stats.
func (p *policy) decide(v Verdict) Decision {
	switch {
	case v.Allowed:
		p.decisions.allowed.Add(1)
	case p.enforce:
		p.decisions.denied.Add(1)
	default:
		p.decisions.shadowDenied.Add(1)
	}
	return Decision{
		Policy: p.Name, Scope: p.Scope, Algorithm: p.Algorithm, Mode: p.Mode,
		Allowed: v.Allowed, Count: v.Count, Limit: v.Limit, Remaining: v.Remaining,
		RetryAfterMs: v.RetryAfter.Milliseconds(),
	}
}
