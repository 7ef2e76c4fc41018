package throttle

import (
	"math"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
)

// A Verdict is one algorithm's answer for one key at one instant: would one
// more hit of some cost be allowed now?
//
// A hit of cost c is c hits' worth, recorded at once (a message's cost,
// docs/contract.md section 15): it is allowed when Count + c <= Limit, and
// a hit that costs 0 always is. A hit that alone costs more than Limit is
// never allowed.
type Verdict struct {
	// Allowed reports whether the hit would be allowed.
	Allowed bool
	// Count is what the key holds: the cost of the hits in the window for
	// the window algorithms (it can exceed Limit, every hit counts), the
	// tokens in use for TokenBucket and GCRA.
	Count int64
	// Limit is the count the key may hold: the policy's limit, or the
	// bucket's capacity (burst) for TokenBucket and GCRA.
	Limit int64
	// Remaining is max(0, Limit-Count): the cost the key may still take
	// now.
	Remaining int64
	// RetryAfter is 0 when Allowed; otherwise the exact time until
	// Count plus the hit's cost fits Limit, in whole milliseconds. A hit
	// that alone costs more than Limit never fits: its RetryAfter is the
	// time until one that costs Limit does (0 if that is now).
	RetryAfter time.Duration
	// spike is why a spike's room is over or not (spike.go); nil for the
	// other algorithms.
	spike *Spike
}

// A Limiter is one algorithm's state for one key. Decide and DecideN are
// read-only; Hit and HitN decide at their instant as Decide would, then
// record the hit. Hit and Decide are HitN and DecideN with n = 1: a hit
// of cost 1.
type Limiter interface {
	Decide(now time.Time) Verdict
	Hit(at time.Time) Verdict
	DecideN(now time.Time, n int) Verdict
	HitN(at time.Time, n int) Verdict
}

// maxCost is the largest cost a hit counts with: a bucket's counter holds
// no more (SlidingWindow's ring, the counts of FixedWindow and
// SlidingWindowCounter), and it is over 4,000 times MaxLimit, so a hit
// that costs more is decided as one of this cost would be.
const maxCost = math.MaxUint32

// costOf is n as a hit's cost: n clamped to 0..maxCost.
func costOf(n int) int64 { return min(max(int64(n), 0), maxCost) }

// kernel is one algorithm, separated from its per-key state so that a Set can
// keep the state of many keys in one slab: S is the fixed-size state of a
// key, ext its variable part (stride elements, the same for every key of a
// policy; the ring of SlidingWindow, the times of Repeat). Times are Unix
// milliseconds.
type kernel[S, E any] interface {
	// stride is the length of ext.
	stride() int
	// slot is the index of the element of ext that a hit at `at` reads
	// first (0 when there is no telling): what ObserveBatch loads early.
	slot(at int64) int
	// fresh is the state of a key that has seen nothing; its ext is zero.
	fresh() S
	// decide is the verdict on a hit of cost 1..maxCost at now (a hit
	// that costs 0 is decideCost's). It is pure: it must not change s or
	// ext.
	decide(s *S, ext []E, now, cost int64) Verdict
	// hit records a hit of cost 1..maxCost at `at` and reports whether it
	// was allowed, as decide would have said just before.
	hit(s *S, ext []E, at, cost int64) bool
	// unhit takes back an allowed hit of that cost recorded at `at`: the
	// state answers from then on as if it had not come (a group's
	// consuming check that another stage denied; see Set.Unconsume).
	unhit(s *S, ext []E, at, cost int64)
	// atRest reports that the key's state at now is the same as fresh,
	// so forgetting the key changes no answer.
	atRest(s *S, ext []E, now int64) bool
	// keep turns the state of a key that a kernel of the same algorithm
	// and window (and resolution) kept with settings old, s and fromExt,
	// into a state of this kernel: s in place, and into ext, zero, of this
	// kernel's stride. It is how a policy keeps its keys when the settings
	// that do not change the meaning of its state change (Set.Reconfigure).
	keep(old settings, s *S, fromExt, ext []E)
	// appendState appends s and ext, as readState reads them back.
	appendState(b []byte, s *S, ext []E) []byte
	// readState reads what appendState wrote into s and ext (zero), and
	// fails r unless it is a state that hits at instants in int64 can
	// make: one on which the other methods keep their promises.
	readState(r *snapshot.Reader, s *S, ext []E)
}

// period reads, for a kernel's readState, the number of a period of w ms
// (a window or a bucket) that an instant in int64 is in, or chat.Never.
func period(r *snapshot.Reader, w int64) int64 {
	p := r.Varint()
	if lo, hi := rolling.FloorDiv(math.MinInt64, w), math.MaxInt64/w; p != chat.Never && (p < lo || p > hi) {
		r.Fail("period %d is out of range (%d to %d)", p, lo, hi)
	}
	return p
}

// noExt is the stride and slot of a kernel whose state has no variable
// part.
type noExt struct{}

func (noExt) stride() int      { return 0 }
func (noExt) slot(_ int64) int { return 0 }

// decideCost is k's verdict on a hit of cost 0..maxCost at now: one that
// costs nothing is allowed, whatever the key holds.
func decideCost[S, E any, K kernel[S, E]](k K, s *S, ext []E, now, cost int64) Verdict {
	if cost == 0 {
		return free(k.decide(s, ext, now, 1))
	}
	return k.decide(s, ext, now, cost)
}

// decideThenHit is the HitN of every standalone algorithm: the verdict
// just before the hit, then the hit recorded (a hit that costs nothing
// records nothing).
func decideThenHit[S, E any, K kernel[S, E]](k K, s *S, ext []E, at time.Time, n int) Verdict {
	t, cost := at.UnixMilli(), costOf(n)
	v := decideCost(k, s, ext, t, cost)
	if cost > 0 {
		k.hit(s, ext, t, cost)
	}
	return v
}

// ceilDiv is a/b rounded toward plus infinity (b > 0).
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// floorMod is a mod b in [0, b) (b > 0): the ring slot of bucket a.
func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func ms(d int64) time.Duration { return time.Duration(d) * time.Millisecond }

func allowed(count, limit int64) Verdict {
	return Verdict{Allowed: true, Count: count, Limit: limit, Remaining: max(0, limit-count)}
}

// denied is the verdict of a hit denied at a key that holds count, which
// fits retryMs later (0 or less: never; see Verdict.RetryAfter).
func denied(count, limit, retryMs int64) Verdict {
	return Verdict{Count: count, Limit: limit, Remaining: max(0, limit-count), RetryAfter: ms(max(retryMs, 0))}
}

// free is v as the verdict of a hit that costs nothing: allowed.
func free(v Verdict) Verdict { return allowed(v.Count, v.Limit) }
