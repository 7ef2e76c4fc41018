package throttle

// PolicyStats are a policy's counters since the Set was made, or since
// the policy of this name came in (Reconfigure).
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
	out := make([]PolicyStats, len(st.policies))
	for i, p := range st.policies {
		keys, evicted, expired := st.stores[i].stats()
		d := p.decisions
		out[i] = PolicyStats{
			Policy: p.Name, Allowed: d.allowed.Load(), Denied: d.denied.Load(), ShadowDenied: d.shadowDenied.Load(),
			Keys: keys, Evicted: evicted, Expired: expired,
		}
	}
	return out
}

// A DecisionLabel is one (policy, result) pair that Check can count.
type DecisionLabel struct{ Policy, Result string }

// DecisionLabels returns every (policy, result) pair Stats can count with
// the policies in force, known before any decision, so that metrics can be
// exported at 0 from the start: allowed and denied for an enforcing policy,
// allowed and shadow_denied for a shadow one; none for a spike, which
// decides nothing.
func (s *Set) DecisionLabels() []DecisionLabel {
	var out []DecisionLabel
	for _, p := range s.state.Load().policies {
		if p.spike {
			continue
		}
		no := ResultDenied
		if !p.enforce {
			no = ResultShadowDenied
		}
		out = append(out, DecisionLabel{p.Name, ResultAllowed}, DecisionLabel{p.Name, no})
	}
	return out
}
