package throttle

import (
	"time"

	"github.com/chatpulse/chatpulse/snapshot"
)

// AlgRepeat names Repeat in a Policy.
const AlgRepeat Algorithm = "repeat"

// MaxRepeatLimit is the largest limit of a Repeat, which keeps limit times
// per key.
const MaxRepeatLimit = 100

// Repeat is the logger-style limiter: it counts occurrences of the same
// text, and denies the next one once limit of them lie in the window. With
// limit 1 it is "show each message at most once per window": any earlier
// occurrence in the window denies the next.
//
// A Repeat tracks one text (a Set keeps one per key and text, keyed by a
// hash of the key's name and one of the normalized text, never the text
// itself; see textHash and table). Time is continuous, to the millisecond:
// an occurrence at p is in the window at T iff T - W < p <= T, the same
// [T-W+1, T] rule as the bucketed windows, with millisecond buckets.
//
// The state is the times of the newest limit occurrences, oldest first: with
// limit 1, just the last-seen time. That is all the decision needs, since
// one more is denied iff the limit-th newest occurrence is still in the
// window, and it frees the moment that occurrence leaves: retry-after is
// oldest kept + W - now. The price is Count: it is exact up to the limit and
// stops there (Count <= Limit), because older occurrences are not kept. The
// newest time is kept apart from the others, in the fixed part of the state:
// with limit 1 there are no others, and whether a key is at rest is known
// from the newest alone.
//
// An occurrence may cost more than one (c occurrences' worth: a message's
// cost, docs/contract.md section 15). Then each kept time has its cost
// (counted up to the limit: one that costs more is over the limit alone
// while it is in the window, as it would be at any higher cost), a hit of
// cost c is allowed iff the window's costs plus c are at most the limit,
// and what is kept is the newest occurrences whose costs reach the limit:
// an occurrence is dropped once those newer than it cost the limit or
// more. An occurrence that costs 1 is kept as before, so a policy whose
// every message costs 1 keeps just the times (weighted false): the costs
// take room only when a policy weighs what messages carry.
//
// Catching up needs no work: the kept times age out by comparison. A late
// hit is inserted in time order if it is still in the window and among the
// newest kept; otherwise it is dropped. A read at an instant before the
// newest occurrence is answered at that occurrence.
type Repeat struct {
	k     repeatKernel
	s     repeatState
	times []int64 // the older occurrences: limit-1 times, then their costs
}

// NewRepeat returns a Repeat denying the next occurrence once limit
// occurrences lie in the window. It panics unless
// 1 <= limit <= MaxRepeatLimit and window is a positive whole number of
// milliseconds, at most MaxWindow.
func NewRepeat(limit int, window time.Duration) *Repeat {
	k, err := newRepeatKernel(settings{limit: limit, window: window}) // any cost: weighted
	if err != nil {
		panic("throttle: NewRepeat: " + err.Error())
	}
	return &Repeat{k: k, s: k.fresh(), times: make([]int64, k.stride())}
}

// Decide reports whether one more occurrence would be allowed at now. It
// changes nothing.
func (r *Repeat) Decide(now time.Time) Verdict { return r.DecideN(now, 1) }

// DecideN reports whether an occurrence of cost n would be allowed at now.
// It changes nothing.
func (r *Repeat) DecideN(now time.Time, n int) Verdict {
	return decideCost(r.k, &r.s, r.times, now.UnixMilli(), costOf(n))
}

// Hit decides at `at` as Decide would, then records the occurrence.
func (r *Repeat) Hit(at time.Time) Verdict { return r.HitN(at, 1) }

// HitN decides at `at` as DecideN would, then records the occurrence, of
// cost n.
func (r *Repeat) HitN(at time.Time, n int) Verdict { return decideThenHit(r.k, &r.s, r.times, at, n) }

type repeatKernel struct {
	limit    int64
	w        int64 // window, ms
	weighted bool  // occurrences may cost more than 1: their costs are kept
}

// newRepeatKernel checks the settings of a Repeat and returns its kernel.
func newRepeatKernel(s settings) (repeatKernel, *FieldError) {
	limit, w, err := checkLimitWindow(s, MaxRepeatLimit)
	return repeatKernel{limit: limit, w: w, weighted: !s.price.unit}, err
}

// repeatAlg is the row of Repeat in the table of algorithms. Its keys
// include the text.
var repeatAlg = algorithm{name: AlgRepeat, text: true, kernel: kernelsOf(newRepeatKernel)}

// stride: limit-1 times, and if weighted their costs after them.
func (k repeatKernel) stride() int {
	if k.weighted {
		return 2 * int(k.limit-1)
	}
	return int(k.limit - 1)
}

// slot is 0: a hit reads the oldest kept occurrence first.
func (k repeatKernel) slot(_ int64) int { return 0 }

// The n kept occurrences are older[:n-1], oldest first, then last; older is
// the variable part of the state, limit-1 times, then (if weighted) the
// cost of each, older[limit-1:][:n-1], with last's in cost.
type repeatState struct {
	n    int32
	cost int32 // last's, if weighted; up to MaxRepeatLimit
	last int64
}

func (k repeatKernel) fresh() repeatState { return repeatState{} }

// kept is the i-th oldest kept occurrence, i < s.n.
func kept(s *repeatState, older []int64, i int) int64 {
	if i == int(s.n)-1 {
		return s.last
	}
	return older[i]
}

// costAt is the cost of the i-th oldest kept occurrence, i < s.n.
func (k repeatKernel) costAt(s *repeatState, older []int64, i int) int64 {
	switch {
	case !k.weighted:
		return 1
	case i == int(s.n)-1:
		return int64(s.cost)
	}
	return older[int(k.limit)-1+i]
}

// set makes the i-th kept occurrence the one at `at` of cost c, i < s.n.
func (k repeatKernel) set(s *repeatState, older []int64, i int, at, c int64) {
	if i == int(s.n)-1 {
		s.last, s.cost = at, int32(c)
		return
	}
	older[i] = at
	if k.weighted {
		older[int(k.limit)-1+i] = c
	}
}

// advance returns the instant a read at t is answered at, the first kept
// occurrence in the window then, and the cost of those in it. It is pure.
func (k repeatKernel) advance(s *repeatState, older []int64, t int64) (at int64, first int, held int64) {
	if s.n == 0 {
		return t, 0, 0
	}
	at = max(t, s.last)
	n := int(s.n)
	for first < n && kept(s, older, first) <= at-k.w {
		first++
	}
	if !k.weighted {
		return at, first, int64(n - first)
	}
	for i := first; i < n; i++ {
		held += k.costAt(s, older, i)
	}
	return at, first, held
}

func (k repeatKernel) decide(s *repeatState, older []int64, now, cost int64) Verdict {
	_, first, held := k.advance(s, older, now)
	count := min(held, k.limit)
	if held+cost <= k.limit {
		return allowed(count, k.limit)
	}
	fit := k.limit - min(cost, k.limit) // what the window may hold for it to fit
	if held <= fit {
		return denied(count, k.limit, 0) // it alone is over the limit
	}
	// The kept occurrences leave the window oldest first.
	for i := first; ; i++ {
		if held -= k.costAt(s, older, i); held <= fit {
			return denied(count, k.limit, kept(s, older, i)+k.w-now)
		}
	}
}

func (k repeatKernel) hit(s *repeatState, older []int64, at, cost int64) bool {
	now, _, held := k.advance(s, older, at)
	ok := held+cost <= k.limit
	if at <= now-k.w {
		return ok // late beyond the window
	}
	if int64(s.n) == k.limit {
		// The costs kept reach the limit: with this one, the oldest of
		// them all goes.
		if at <= kept(s, older, 0) {
			return ok // older than every kept occurrence: never decides anything
		}
		k.dropOldest(s, older)
	}
	k.insert(s, older, at, min(cost, k.limit))
	if k.weighted {
		k.trim(s, older)
	}
	return ok
}

// insert adds an occurrence at `at` of cost c among the s.n < limit kept,
// after those at the same instant.
func (k repeatKernel) insert(s *repeatState, older []int64, at, c int64) {
	n := int(s.n)
	s.n++
	if n == 0 || at >= s.last {
		if n > 0 {
			older[n-1] = s.last
			if k.weighted {
				older[int(k.limit)-1+n-1] = int64(s.cost)
			}
		}
		s.last, s.cost = at, int32(c)
		return
	}
	i := n - 1
	for i > 0 && older[i-1] > at {
		k.set(s, older, i, older[i-1], k.costAt(s, older, i-1))
		i--
	}
	k.set(s, older, i, at, c)
}

// dropOldest forgets the oldest kept occurrence.
func (k repeatKernel) dropOldest(s *repeatState, older []int64) {
	n := int(s.n)
	if n > 1 {
		copy(older, older[1:n-1])
		if k.weighted {
			c := older[k.limit-1:]
			copy(c, c[1:n-1])
		}
	}
	s.n--
}

// trim drops the oldest kept occurrences while those newer than it cost
// the limit or more: they deny every hit as long as it is in the window.
func (k repeatKernel) trim(s *repeatState, older []int64) {
	held := k.sum(s, older)
	for s.n > 1 && held-k.costAt(s, older, 0) >= k.limit {
		held -= k.costAt(s, older, 0)
		k.dropOldest(s, older)
	}
}

// sum is the cost of every kept occurrence, in the window or not.
func (k repeatKernel) sum(s *repeatState, older []int64) int64 {
	held := int64(0)
	for i := range int(s.n) {
		held += k.costAt(s, older, i)
	}
	return held
}

// unhit forgets the newest kept occurrence at `at` of that cost, if it is
// still kept.
func (k repeatKernel) unhit(s *repeatState, older []int64, at, cost int64) {
	n := int(s.n)
	for i := n - 1; i >= 0; i-- {
		if kept(s, older, i) != at || k.costAt(s, older, i) != min(cost, k.limit) && k.weighted {
			continue
		}
		// Each newer one moves one place down.
		for j := i; j < n-1; j++ {
			k.set(s, older, j, kept(s, older, j+1), k.costAt(s, older, j+1))
		}
		if n == 1 { // none left: as fresh, which is how a state saves it
			*s = repeatState{}
			return
		}
		s.last, s.cost = older[n-2], int32(k.costAt(s, older, n-2)) // the one before the last becomes last
		s.n--
		return
	}
}

func (k repeatKernel) atRest(s *repeatState, _ []int64, now int64) bool {
	return s.n == 0 || s.last <= now-k.w
}

// keep keeps the newest occurrences of those kept that a Repeat of the
// new limit keeps: with a lower limit exactly those that a Repeat of that
// limit would have kept; with a higher one, those of the old limit, since
// the older ones were not kept. Costs are counted up to the new limit.
func (k repeatKernel) keep(old settings, s *repeatState, fromOlder, older []int64) {
	from := repeatKernel{limit: int64(old.limit), w: k.w, weighted: k.weighted}
	cost := func(i int) int64 { return min(from.costAt(s, fromOlder, i), k.limit) }
	held := int64(0)
	for i := range int(s.n) {
		held += cost(i)
	}
	drop := 0 // the oldest kept that the new limit does not keep
	for ; int(s.n)-drop > 1 && held-cost(drop) >= k.limit; drop++ {
		held -= cost(drop)
	}
	n := int(s.n) - drop
	for i := range n - 1 {
		older[i] = fromOlder[drop+i]
		if k.weighted {
			older[int(k.limit)-1+i] = cost(drop + i)
		}
	}
	s.n, s.cost = int32(n), int32(min(int64(s.cost), k.limit))
}

// A saved Repeat is the number of kept occurrences, the newest, then how
// long before it each older one is, oldest first; if weighted, the cost
// of each, oldest first. The elements of older past the kept ones decide
// nothing, and are not saved.
func (k repeatKernel) appendState(b []byte, s *repeatState, older []int64) []byte {
	b = snapshot.AppendUvarint(b, uint64(s.n))
	b = snapshot.AppendVarint(b, s.last)
	for _, t := range older[:max(s.n-1, 0)] {
		b = snapshot.AppendUvarint(b, uint64(s.last)-uint64(t))
	}
	if k.weighted {
		for i := range int(s.n) {
			b = snapshot.AppendUvarint(b, uint64(k.costAt(s, older, i)))
		}
	}
	return b
}

// readState takes up to limit occurrences in time order, and if
// weighted, costs of 1 to limit that hits could have left: all but the
// oldest cost less than the limit.
func (k repeatKernel) readState(r *snapshot.Reader, s *repeatState, older []int64) {
	s.n = int32(r.UvarintUpTo(uint64(k.limit), "occurrences"))
	s.last = r.Varint()
	if s.n == 0 && s.last != 0 {
		r.Fail("no occurrence, but a newest one at %d", s.last)
	}
	// A difference at most the one before keeps the occurrences in
	// order, and the first at most s.last - chat.Never keeps them in
	// range.
	most := uint64(s.last) ^ 1<<63 // s.last - chat.Never
	for i := range max(s.n-1, 0) {
		d := r.UvarintUpTo(most, "ms before the newest occurrence")
		older[i] = int64(uint64(s.last) - d)
		most = d
	}
	if !k.weighted {
		return
	}
	held := int64(0)
	for i := range int(s.n) {
		c := int64(r.UvarintUpTo(uint64(k.limit), "cost"))
		if c == 0 {
			r.Fail("an occurrence that costs 0")
		}
		k.set(s, older, i, kept(s, older, i), c)
		held += c
	}
	if s.n > 1 && held-k.costAt(s, older, 0) >= k.limit {
		r.Fail("occurrences that cost %d kept beside newer ones that cost the limit", k.costAt(s, older, 0))
	}
}
