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
// Catching up needs no work: the kept times age out by comparison. A late
// hit is inserted in time order if it is still in the window and among the
// newest limit; otherwise it is dropped. A read at an instant before the
// newest occurrence is answered at that occurrence.
type Repeat struct {
	k     repeatKernel
	s     repeatState
	times []int64 // the older limit-1 occurrences
}

// NewRepeat returns a Repeat denying the next occurrence once limit
// occurrences lie in the window. It panics unless
// 1 <= limit <= MaxRepeatLimit and window is a positive whole number of
// milliseconds, at most MaxWindow.
func NewRepeat(limit int, window time.Duration) *Repeat {
	k, err := newRepeatKernel(settings{limit: limit, window: window})
	if err != nil {
		panic("throttle: NewRepeat: " + err.Error())
	}
	return &Repeat{k: k, s: k.fresh(), times: make([]int64, k.stride())}
}

// Decide reports whether one more occurrence would be allowed at now. It
// changes nothing.
func (r *Repeat) Decide(now time.Time) Verdict { return r.k.decide(&r.s, r.times, now.UnixMilli()) }

// Hit decides at `at` as Decide would, then records the occurrence.
func (r *Repeat) Hit(at time.Time) Verdict {
	return decideThenHit(r.k, &r.s, r.times, at)
}

type repeatKernel struct {
	limit int64
	w     int64 // window, ms
}

// newRepeatKernel checks the settings of a Repeat and returns its kernel.
func newRepeatKernel(s settings) (repeatKernel, *FieldError) {
	limit, w, err := checkLimitWindow(s, MaxRepeatLimit)
	return repeatKernel{limit: limit, w: w}, err
}

// repeatAlg is the row of Repeat in the table of algorithms. Its keys
// include the text.
var repeatAlg = algorithm{name: AlgRepeat, text: true, kernel: kernelsOf(newRepeatKernel)}

func (k repeatKernel) stride() int { return int(k.limit - 1) }

// slot is 0: a hit reads the oldest kept occurrence first.
func (k repeatKernel) slot(_ int64) int { return 0 }

// The n kept occurrences are older[:n-1], oldest first, then last; older is
// the variable part of the state, limit-1 times.
type repeatState struct {
	n    int32
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

// advance returns the instant a read at t is answered at, and how many
// kept occurrences are in the window then. It is pure.
func (k repeatKernel) advance(s *repeatState, older []int64, t int64) (at, count int64) {
	if s.n == 0 {
		return t, 0
	}
	at = max(t, s.last)
	i := 0
	for i < int(s.n) && kept(s, older, i) <= at-k.w {
		i++
	}
	return at, int64(int(s.n) - i)
}

func (k repeatKernel) decide(s *repeatState, older []int64, now int64) Verdict {
	_, count := k.advance(s, older, now)
	if count < k.limit {
		return allowed(count, k.limit)
	}
	// All limit kept occurrences are in the window; the oldest frees first.
	return denied(count, k.limit, kept(s, older, 0)+k.w-now)
}

func (k repeatKernel) hit(s *repeatState, older []int64, at int64) bool {
	now, count := k.advance(s, older, at)
	ok := count < k.limit
	if at <= now-k.w {
		return ok // late beyond the window
	}
	n := int(s.n)
	if int64(n) == k.limit {
		if at <= kept(s, older, 0) {
			return ok // older than every kept occurrence: never decides anything
		}
		if n > 1 {
			copy(older, older[1:n-1])
		}
		n--
	}
	// Insert at among the n kept, after those at the same instant.
	if n == 0 || at >= s.last {
		if n > 0 {
			older[n-1] = s.last
		}
		s.last = at
	} else {
		i := n - 1
		for i > 0 && older[i-1] > at {
			older[i] = older[i-1]
			i--
		}
		older[i] = at
	}
	s.n = int32(n + 1)
	return ok
}

// unhit forgets the newest kept occurrence at `at`, if it is still kept.
func (k repeatKernel) unhit(s *repeatState, older []int64, at int64) {
	n := int(s.n)
	for i := n - 1; i >= 0; i-- {
		if kept(s, older, i) != at {
			continue
		}
		if i == n-1 { // the newest: the one before it becomes last
			if n > 1 {
				s.last = older[n-2]
			}
		} else {
			copy(older[i:n-2], older[i+1:n-1])
		}
		s.n--
		return
	}
}

func (k repeatKernel) atRest(s *repeatState, _ []int64, now int64) bool {
	return s.n == 0 || s.last <= now-k.w
}

// keep keeps the newest limit of the occurrences kept: with a lower limit
// exactly those that a Repeat of that limit would have kept; with a higher
// one, the old limit of them, since the older ones were not kept.
func (k repeatKernel) keep(_ settings, s *repeatState, fromOlder, older []int64) {
	n := int64(s.n)
	if n > k.limit {
		fromOlder = fromOlder[n-k.limit:]
		n = k.limit
		s.n = int32(n)
	}
	copy(older, fromOlder[:max(n-1, 0)])
}

// A saved Repeat is the number of kept occurrences, the newest, then how
// long before it each older one is, oldest first. The elements of older
// past the kept ones decide nothing, and are not saved.
func (k repeatKernel) appendState(b []byte, s *repeatState, older []int64) []byte {
	b = snapshot.AppendUvarint(b, uint64(s.n))
	b = snapshot.AppendVarint(b, s.last)
	for _, t := range older[:max(s.n-1, 0)] {
		b = snapshot.AppendUvarint(b, uint64(s.last)-uint64(t))
	}
	return b
}

// readState takes up to limit occurrences in time order.
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
}
