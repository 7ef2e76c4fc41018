package throttle

// Reconfigure replaces the Set's policies with these, while it runs: it is
// how a moderator's change of the policies file takes effect without a
// restart. They must be valid and have distinct names, as for NewSet; if
// they are not, Reconfigure returns the error NewSet would and changes
// nothing. Their order is the order of decisions from then on.
//
// What each policy keeps:
//
//   - A policy of the same name, scope, algorithm, window and cost as one
//     in force (and, for sliding_window, the same resolution; for spike,
//     the same resolution and baseline) keeps its keys,
//     their states and their alert marks, whatever else changed: limit,
//     burst, mode, rooms. A key that was over the limit stays over it, and
//     one that crossed and is still over does not alert again; a key that
//     a lowered limit puts over is denied at once, and alerts (and shows in
//     Active) with its next message, the first it sees over.
//   - Every other policy, new or changed in its scope, algorithm, window,
//     resolution or cost, starts with no key, as in a new Set: a Set never sees
//     the stream again, so whatever history a new policy should have, a
//     caller that can read the stream again must replay it.
//   - A policy that is gone is forgotten, with its keys.
//
// A kept policy's state means the same under its new settings, so it
// answers from then on as a Set made with the new settings would have,
// had it seen the messages the policy saw:
//
//   - sliding_window, sliding_window_counter and fixed_window count every
//     message whatever the limit, so their answers are exactly those.
//   - repeat keeps the newest limit occurrences of each text: with a lower
//     limit it keeps the newest of those, so its answers are exactly those
//     too; with a higher one, it has only the old limit of them, and may
//     let through a text the new limit would deny, for one window at most.
//   - spike keeps each room's messages, whatever its factor, min_messages
//     and min_users, so its answers are exactly those too.
//   - token_bucket keeps each key's tokens (its level is in units of the
//     window), at most the new burst, and refills at the new rate from the
//     key's last message on.
//   - gcra keeps each key's TAT, the instant at which its bucket is full
//     again (rounded up to the new units of 1/limit millisecond), so a key
//     waits as long as it would have to be full again.
//   - A mode changed to shadow clears the alert marks (a shadow policy
//     never alerts); changed to enforce, a key already over alerts with its
//     next message. Rooms changed: the keys keep the messages counted under
//     the old rooms until they leave the window; a key of a room the
//     policy no longer sees is never reached again, and Active does not
//     list it.
//
// The counters of Stats go by name: a policy of a name in force goes on
// counting from where the name was, kept or started over; a new name
// starts at 0.
//
// Reconfigure swaps the policies and their state at once: a call that
// runs meanwhile (Check, Active, Stats, AppendState, or any other) works
// with either the old policies and state or the new ones, never a mix, and
// a message that Observe or ObserveBatch records meanwhile is in the new
// state. It waits for those running, and makes the new ones wait for it,
// while it copies the kept policies' keys: a few milliseconds for 100,000
// keys. Policies equal to those in force change nothing.
func (s *Set) Reconfigure(policies []Policy) error {
	r, err := newRules(policies)
	if err != nil {
		return err
	}
	s.swap.Lock()
	defer s.swap.Unlock()
	old := s.state.Load()
	if sameRules(old.rules, r) {
		return nil
	}
	byName := make(map[string]int, len(old.policies))
	for i, p := range old.policies {
		byName[p.Name] = i
	}
	st := &state{rules: r, hk: old.hk}
	for _, p := range r.policies {
		i, ok := byName[p.Name]
		if !ok {
			st.stores = append(st.stores, s.emptyStore(p, old.hk))
			continue
		}
		was, from := old.policies[i], old.stores[i]
		p.decisions = was.decisions
		var store store
		if keeps(was.Policy, p.Policy) {
			store = algorithmNamed(p.Algorithm).kernel.carry(p.settings(), was.settings(), from, p.enforce)
			store.setRule(extraRuleOf(p))
		} else {
			store = s.emptyStore(p, old.hk)
			_, evicted, expired := from.stats()
			store.addCounts(evicted, expired)
		}
		st.stores = append(st.stores, store)
	}
	s.state.Store(st)
	return nil
}

// keeps reports whether the state of policy was means the same under now,
// both with their defaults filled in: the settings that shape it are the
// same.
func keeps(was, now Policy) bool {
	return was.Scope == now.Scope && was.Algorithm == now.Algorithm && was.Window == now.Window && was.Resolution == now.Resolution &&
		was.Baseline == now.Baseline && was.Cost == now.Cost && // what the state counts in
		was.MinChars == now.MinChars // similar: which texts its windows hold
}

// sameRules reports whether a and b are the same policies in the same
// order.
func sameRules(a, b rules) bool {
	if len(a.policies) != len(b.policies) {
		return false
	}
	for i := range a.policies {
		if describe(a.policies[i].Policy) != describe(b.policies[i].Policy) {
			return false
		}
	}
	return true
}
