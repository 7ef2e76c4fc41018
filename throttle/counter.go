package throttle

import (
	"math"
	"math/bits"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
)

// AlgSlidingWindowCounter names SlidingWindowCounter in a Policy.
const AlgSlidingWindowCounter Algorithm = "sliding_window_counter"

// SlidingWindowCounter estimates a sliding window from two fixed windows, in
// O(1) memory per key: the count of the current window and of the one before.
//
// Windows of length W are aligned to the Unix epoch: window w covers
// [w·W, (w+1)·W). At an instant t in window w, with e = t - w·W milliseconds
// elapsed in it, the estimate of the hits in the sliding window (t-W, t] is
//
//	estimate = prev·(W-e)/W + curr
//
// where curr counts the hits in window w and prev those in window w-1: the
// previous window is assumed to have been uniform, and the fraction of it
// still inside the sliding window is (W-e)/W. Count is floor(estimate). A
// hit of cost c (c hits' worth; 1 for one hit) is allowed iff
// Count + c <= limit, that is iff estimate < L, with L = limit - c + 1,
// which is decided without rounding as prev·(W-e) + curr·W < L·W. Every hit
// is recorded, allowed or not.
//
// Retry-after solves the same inequality for the first millisecond e' at
// which it holds (with L from min(c, limit): a hit that alone costs more
// than the limit never fits, and is told when one that costs the limit
// does):
//
//   - if curr < L, the estimate falls as e grows:
//     e' = floor((prev+curr-L)·W/prev) + 1; if e' falls past the end of
//     the window, the next window starts with estimate = curr < L, so the
//     answer is the start of the next window;
//   - if curr >= L, no instant of this window helps; in the next window
//     curr becomes prev, and e' = floor((curr-L)·W/curr) + 1 into it.
//
// Catching up (advance) is lazy: when t is one window later, curr becomes
// prev and curr starts at 0; two or more windows later, both are 0. A late
// hit in the previous window adds to prev; older ones are dropped. A read at
// an instant before the key's current window is answered at the start of
// that window.
type SlidingWindowCounter struct {
	k counterKernel
	s counterState
}

// NewSlidingWindowCounter returns a SlidingWindowCounter allowing an
// estimated limit hits per window. It panics unless 1 <= limit <= MaxLimit
// and window is a positive whole number of milliseconds, at most MaxWindow.
func NewSlidingWindowCounter(limit int, window time.Duration) *SlidingWindowCounter {
	k, err := newCounterKernel(settings{limit: limit, window: window})
	if err != nil {
		panic("throttle: NewSlidingWindowCounter: " + err.Error())
	}
	return &SlidingWindowCounter{k: k, s: k.fresh()}
}

// Decide reports whether one more hit would be allowed at now. It changes
// nothing.
func (c *SlidingWindowCounter) Decide(now time.Time) Verdict { return c.DecideN(now, 1) }

// DecideN reports whether a hit of cost n would be allowed at now. It
// changes nothing.
func (c *SlidingWindowCounter) DecideN(now time.Time, n int) Verdict {
	return decideCost(c.k, &c.s, nil, now.UnixMilli(), costOf(n))
}

// Hit decides at `at` as Decide would, then records the hit, allowed or not.
func (c *SlidingWindowCounter) Hit(at time.Time) Verdict { return c.HitN(at, 1) }

// HitN decides at `at` as DecideN would, then records the hit, n hits'
// worth, allowed or not.
func (c *SlidingWindowCounter) HitN(at time.Time, n int) Verdict {
	return decideThenHit(c.k, &c.s, nil, at, n)
}

type counterKernel struct {
	noExt
	limit int64
	w     int64 // window, ms
}

// newCounterKernel checks the settings of a sliding window counter and
// returns its kernel.
func newCounterKernel(s settings) (counterKernel, *FieldError) {
	limit, w, err := checkLimitWindow(s, MaxLimit)
	return counterKernel{limit: limit, w: w}, err
}

// counterAlg is the row of SlidingWindowCounter in the table of algorithms.
var counterAlg = algorithm{name: AlgSlidingWindowCounter, kernel: kernelsOf(newCounterKernel)}

type counterState struct {
	prev, curr uint32
	win        int64 // the window curr counts; chat.Never before the first hit
}

func (k counterKernel) fresh() counterState { return counterState{win: chat.Never} }

// advance is the state at instant t, and e, the milliseconds elapsed in its
// window. It is pure: s is not changed.
func (k counterKernel) advance(s counterState, t int64) (_ counterState, e int64) {
	wt := rolling.FloorDiv(t, k.w)
	switch {
	case s.win == chat.Never:
		return counterState{win: wt}, t - wt*k.w
	case wt < s.win:
		return s, 0
	case wt == s.win:
	case wt == s.win+1:
		s.prev, s.curr = s.curr, 0
	default:
		s.prev, s.curr = 0, 0
	}
	s.win = wt
	return s, t - wt*k.w
}

// scaled returns estimate·W = prev·(W-e) + curr·W, in 128 bits: prev and
// curr reach 2^32, W 2^35.
func (k counterKernel) scaled(a counterState, e int64) (hi, lo uint64) {
	w := uint64(k.w)
	hi, lo = bits.Mul64(uint64(a.prev), w-uint64(e))
	hi2, lo2 := bits.Mul64(uint64(a.curr), w)
	lo, carry := bits.Add64(lo, lo2, 0)
	return hi + hi2 + carry, lo
}

func (k counterKernel) decide(s *counterState, _ []struct{}, now, cost int64) Verdict {
	a, e := k.advance(*s, now)
	p, c, w := uint64(a.prev), uint64(a.curr), uint64(k.w)
	hi, lo := k.scaled(a, e)
	count, _ := bits.Div64(hi, lo, w) // < p+c, so hi < w
	if int64(count)+cost <= k.limit {
		return allowed(int64(count), k.limit)
	}
	// L: the estimate must fall below it. Denied with curr < L implies
	// prev·(W-e) >= (L-curr)·W > 0.
	l := uint64(k.limit - min(cost, k.limit) + 1)
	if hi == 0 && lo < l*w {
		return denied(int64(count), k.limit, 0) // it alone is over the limit
	}
	start := a.win * k.w
	var at int64
	switch {
	case c >= l:
		at = start + k.w + int64(mulDiv(c-l, w, c)) + 1
	default:
		if e1 := int64(mulDiv(p+c-l, w, p)) + 1; e1 < k.w {
			at = start + e1
		} else {
			at = start + k.w
		}
	}
	return denied(int64(count), k.limit, at-now)
}

// mulDiv is floor(a·b/c), for a·b/c < 2^64.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

func (k counterKernel) hit(s *counterState, _ []struct{}, at, cost int64) bool {
	a, e := k.advance(*s, at)
	hi, lo := k.scaled(a, e)
	ok := cost <= k.limit && hi == 0 && lo < uint64(k.limit-cost+1)*uint64(k.w)
	switch rolling.FloorDiv(at, k.w) {
	case a.win:
		a.curr = satAdd(a.curr, cost)
	case a.win - 1:
		a.prev = satAdd(a.prev, cost)
	}
	*s = a
	return ok
}

func (k counterKernel) unhit(s *counterState, _ []struct{}, at, cost int64) {
	switch rolling.FloorDiv(at, k.w) {
	case s.win:
		s.curr -= uint32(min(int64(s.curr), cost))
	case s.win - 1:
		s.prev -= uint32(min(int64(s.prev), cost))
	}
}

func (k counterKernel) atRest(s *counterState, _ []struct{}, now int64) bool {
	a, _ := k.advance(*s, now)
	return a.prev == 0 && a.curr == 0
}

// keep keeps both counts as they are: they count every message, whatever
// the limit.
func (k counterKernel) keep(settings, *counterState, []struct{}, []struct{}) {}

func (k counterKernel) appendState(b []byte, s *counterState, _ []struct{}) []byte {
	b = snapshot.AppendVarint(b, s.win)
	b = snapshot.AppendUvarint(b, uint64(s.prev))
	return snapshot.AppendUvarint(b, uint64(s.curr))
}

func (k counterKernel) readState(r *snapshot.Reader, s *counterState, _ []struct{}) {
	s.win = period(r, k.w)
	s.prev, s.curr = r.Uvarint32(), r.Uvarint32()
}

// satAdd is n + cost, or math.MaxUint32 if that is more.
func satAdd(n uint32, cost int64) uint32 {
	return uint32(min(int64(n)+cost, math.MaxUint32))
}
