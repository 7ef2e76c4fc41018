package throttle

// What a few keys keep beyond their algorithm's state: the ids of their
// recent hits, so that a consuming check and the event it announced count
// once (docs/contract.md section 10), and their penalty (section 11). A
// table keeps them by place, in a map that holds only the keys that have
// some, so that a table of keys without either pays one nil map check a
// hit.

// keyExtra is one key's extras.
type keyExtra struct {
	// ids are the key's recent hits that carried an id, in the order they
	// came (late events make it not quite the order of their instants): at
	// most the table's idCap, none a window older than the newest.
	ids []idHit
	// until is when the key's penalty ends (Unix ms); 0: none.
	until int64
	// strikes are the key's crossings within the policy's
	// strikes_within, oldest first, at most one per step of its escalate.
	strikes []int64
}

// An idHit is a hit that carried an id.
type idHit struct {
	id       uint64 // the id's keyed hash
	at       int64  // the hit's instant
	since    int64  // consumed: the key's alert mark just before it
	cost     int64  // what it counted, 1 to maxCost: what untake takes back
	consumed bool   // a consuming check's, not an event's
}

// extraRule is what a table needs to keep its keys' extras: the policy's
// window (how long an id is remembered), how many ids a key may keep (no
// fewer than the hits the policy can allow in a window), and its penalty.
type extraRule struct {
	window int64 // ms
	idCap  int
	steps  []int64 // the penalty of the 1st, 2nd... crossing, ms; empty: none
	within int64   // how long a crossing counts as a strike, ms; 0: only the first step
	// acting: the policy names acts, so every message over it while the
	// key is marked is reported (crossing.again), not only the crossing.
	acting bool
}

// extraRuleOf is the extraRule of a policy.
func extraRuleOf(p *policy) extraRule {
	r := extraRule{window: p.Window.Milliseconds(), idCap: max(p.Limit, p.Burst) + p.Limit, acting: len(p.Act) > 0 && p.enforce}
	switch {
	case len(p.Escalate) > 0:
		for _, d := range p.Escalate {
			r.steps = append(r.steps, d.Milliseconds())
		}
		r.within = p.StrikesWithin.Milliseconds()
	case p.Penalty > 0:
		r.steps = []int64{p.Penalty.Milliseconds()}
	case p.joins && p.Acts(ActLock):
		r.steps = []int64{p.LockFor.Milliseconds()} // the room stays locked that long: joins are denied
	}
	return r
}

// counted reports whether the key counted a hit with id within the window
// before now: consumed only, or any.
func (x *keyExtra) counted(id uint64, now, window int64, consumedOnly bool) bool {
	for i := range x.ids {
		if h := &x.ids[i]; h.id == id && h.at > now-window && (h.consumed || !consumedOnly) {
			return true
		}
	}
	return false
}

// remember adds a hit with an id, forgetting those a window older than it
// and, past idCap, the first that came.
func (x *keyExtra) remember(h idHit, r *extraRule) {
	kept := x.ids[:0]
	for _, o := range x.ids {
		if o.at > h.at-r.window {
			kept = append(kept, o)
		}
	}
	if n := len(kept) - r.idCap + 1; n > 0 {
		kept = append(kept[:0], kept[n:]...)
	}
	x.ids = append(kept, h)
}

// forget takes back the newest consumed hit with id, and returns it.
func (x *keyExtra) forget(id uint64) (idHit, bool) {
	for i := len(x.ids) - 1; i >= 0; i-- {
		if h := x.ids[i]; h.id == id && h.consumed {
			x.ids = append(x.ids[:i], x.ids[i+1:]...)
			return h, true
		}
	}
	return idHit{}, false
}

// strike records a crossing at `at` and returns the penalty's end: the
// step of the number of crossings within strikes_within, this one
// included.
func (x *keyExtra) strike(at int64, r *extraRule) int64 {
	n := 1
	if r.within > 0 {
		drop := 0
		for drop < len(x.strikes) && x.strikes[drop] <= at-r.within {
			drop++
		}
		if len(x.strikes)-drop >= len(r.steps) { // past the last step: the last step again
			drop = len(x.strikes) - len(r.steps) + 1
		}
		x.strikes = append(x.strikes[:0], x.strikes[drop:]...)
		x.strikes = append(x.strikes, at)
		n = len(x.strikes)
	}
	x.until = max(x.until, at+r.steps[min(n, len(r.steps))-1])
	return x.until
}

// atRest reports whether the extras change no answer at now: no penalty
// in force, no id still remembered, no strike still counted.
func (x *keyExtra) atRest(now int64, r *extraRule) bool {
	if x.until > now {
		return false
	}
	for i := range x.ids {
		if x.ids[i].at > now-r.window {
			return false
		}
	}
	if n := len(x.strikes); n > 0 && x.strikes[n-1] > now-r.within {
		return false
	}
	return true
}

// penalty applies a penalty in force at now to a verdict.
func (x *keyExtra) penalty(v Verdict, now int64) Verdict {
	if x == nil || x.until <= now {
		return v
	}
	v.Allowed, v.Remaining = false, 0
	v.RetryAfter = max(v.RetryAfter, ms(x.until-now))
	return v
}

// extraOf returns the extras of the key at place i, making them if need be.
func (t *table[S, E, K]) extraOf(i int32) *keyExtra {
	if x := t.extra[i]; x != nil {
		return x
	}
	if t.extra == nil {
		t.extra = make(map[int32]*keyExtra)
	}
	x := &keyExtra{}
	t.extra[i] = x
	return x
}

// extraAt is the extras of the key at place i, or nil.
func (t *table[S, E, K]) extraAt(i int32) *keyExtra {
	if t.extra == nil {
		return nil
	}
	return t.extra[i]
}

// atRest reports whether the key at place i is the same as a fresh one at
// now: its algorithm's state at rest and its extras too.
func (t *table[S, E, K]) atRest(i int32, now int64) bool {
	if !t.k.atRest(&t.states[i].st, t.extOf(i), now) {
		return false
	}
	x := t.extraAt(i)
	return x == nil || x.atRest(now, &t.rule)
}

// verdictAt is the verdict of the key at place i at now on a message of
// that cost, its penalty included: a message that costs nothing is
// allowed, penalty or not (docs/contract.md section 15).
func (t *table[S, E, K]) verdictAt(i int32, now, cost int64) Verdict {
	v := decideCost(t.k, &t.states[i].st, t.extOf(i), now, cost)
	if cost == 0 {
		return v
	}
	return t.extraAt(i).penalty(v, now)
}
