package throttle

import (
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/snapshot"
)

// AlgTokenBucket names TokenBucket in a Policy.
const AlgTokenBucket Algorithm = "token_bucket"

// TokenBucket lets a key spend tokens from a bucket that holds at most burst
// of them, initially full, and refills at limit tokens per window. Each hit
// takes one token (a hit of cost c, c tokens); a hit that finds too few
// whole tokens is denied, and one that costs more than burst always is.
// Short bursts of up to burst hits pass at once, and over a long time the
// rate is limit per window. It is the algorithm of golang.org/x/time/rate.
//
// A denied hit is not charged, as in x/time/rate's Allow: the bucket cannot
// go into debt, so a key that keeps sending is let through at the refill rate
// rather than locked out forever. So Count, the tokens in use
// (burst - whole tokens left), never exceeds burst, and Limit in a Verdict is
// burst (the capacity).
//
// Tokens are kept as an integer so that every answer is exact: a token is W
// units (W the window in milliseconds) and the bucket gains limit units per
// millisecond, so the capacity is burst·W units. Nothing ticks: advance
// computes the level at an instant from the level at the last update,
// min(capacity, level + elapsed·limit), and is the only place where time
// moves. Retry-after is the time the missing units take to drip in,
// ceil((c·W - level)/limit) milliseconds.
//
// Example (burst 3, 1 token per second), hits at 0, 0, 0, 0, 1, 1.5 and 3
// seconds: allowed, allowed, allowed, denied, allowed, denied, allowed.
//
// A hit or read at an instant before the last update is taken at the last
// update.
type TokenBucket struct {
	k bucketKernel
	s bucketState
}

// NewTokenBucket returns a full TokenBucket of burst tokens refilled at limit
// tokens per window; burst 0 means limit. It panics unless
// 1 <= limit <= MaxLimit, 0 <= burst <= MaxLimit and window is a positive
// whole number of milliseconds, at most MaxWindow.
func NewTokenBucket(limit int, window time.Duration, burst int) *TokenBucket {
	k, err := newBucketKernel(settings{limit: limit, window: window, burst: burst})
	if err != nil {
		panic("throttle: NewTokenBucket: " + err.Error())
	}
	return &TokenBucket{k: k, s: k.fresh()}
}

// Decide reports whether one more hit would be allowed at now. It changes
// nothing.
func (b *TokenBucket) Decide(now time.Time) Verdict { return b.DecideN(now, 1) }

// DecideN reports whether a hit of cost n (n tokens) would be allowed at
// now. It changes nothing.
func (b *TokenBucket) DecideN(now time.Time, n int) Verdict {
	return decideCost(b.k, &b.s, nil, now.UnixMilli(), costOf(n))
}

// Hit decides at `at` as Decide would, then takes a token if there is one.
func (b *TokenBucket) Hit(at time.Time) Verdict { return b.HitN(at, 1) }

// HitN decides at `at` as DecideN would, then takes n tokens if there are
// that many.
func (b *TokenBucket) HitN(at time.Time, n int) Verdict { return decideThenHit(b.k, &b.s, nil, at, n) }

type bucketKernel struct {
	noExt
	limit    int64 // units gained per ms
	burst    int64
	w        int64 // units in one token: the window in ms
	capacity int64 // burst·w
	fill     int64 // ms to fill an empty bucket: ceil(capacity/limit)
}

// newBucketKernel checks the settings of a token bucket and returns its
// kernel.
func newBucketKernel(s settings) (bucketKernel, *FieldError) {
	limit, w, burst, err := checkBucket(s)
	if err != nil {
		return bucketKernel{}, err
	}
	return bucketKernel{limit: limit, burst: burst, w: w, capacity: burst * w, fill: ceilDiv(burst*w, limit)}, nil
}

// bucketAlg is the row of TokenBucket in the table of algorithms.
var bucketAlg = algorithm{name: AlgTokenBucket, burst: true, kernel: kernelsOf(newBucketKernel)}

type bucketState struct {
	level int64 // units in the bucket at last
	last  int64 // ms of the last update; chat.Never: never used, full
}

func (k bucketKernel) fresh() bucketState { return bucketState{last: chat.Never} }

// advance returns the level at instant t and the instant it belongs to
// (never before s.last). It is pure.
func (k bucketKernel) advance(s bucketState, t int64) (level, at int64) {
	switch {
	case s.last == chat.Never:
		return k.capacity, t
	case t <= s.last:
		return s.level, s.last
	}
	// Past fill, even an empty bucket is full; below it, elapsed·limit
	// cannot overflow.
	if elapsed := t - s.last; elapsed < k.fill {
		return min(k.capacity, s.level+elapsed*k.limit), t
	}
	return k.capacity, t
}

func (k bucketKernel) decide(s *bucketState, _ []struct{}, now, cost int64) Verdict {
	level, at := k.advance(*s, now)
	tokens := level / k.w
	if tokens >= cost {
		return allowed(k.burst-tokens, k.burst)
	}
	need := min(cost, k.burst)*k.w - level // the units missing
	if need <= 0 {
		return denied(k.burst-tokens, k.burst, 0) // it alone is over the burst
	}
	return denied(k.burst-tokens, k.burst, at+ceilDiv(need, k.limit)-now)
}

func (k bucketKernel) hit(s *bucketState, _ []struct{}, at, cost int64) bool {
	level, t := k.advance(*s, at)
	ok := level/k.w >= cost
	if ok {
		level -= cost * k.w
	}
	*s = bucketState{level: level, last: t}
	return ok
}

// unhit gives the tokens back, as of the bucket's last update (never over
// its capacity).
func (k bucketKernel) unhit(s *bucketState, _ []struct{}, _, cost int64) {
	s.level = min(s.level+min(cost, k.burst)*k.w, k.capacity)
}

func (k bucketKernel) atRest(s *bucketState, _ []struct{}, now int64) bool {
	level, _ := k.advance(*s, now)
	return level == k.capacity
}

// keep keeps the level, which is in units of the window, so the same
// number of tokens whatever the limit and burst, but no more than the new
// capacity: a key keeps the tokens it had at its last update, at most
// burst of them, and refills at the new rate from then on.
func (k bucketKernel) keep(_ settings, s *bucketState, _, _ []struct{}) {
	s.level = min(s.level, k.capacity)
}

func (k bucketKernel) appendState(b []byte, s *bucketState, _ []struct{}) []byte {
	b = snapshot.AppendVarint(b, s.last)
	return snapshot.AppendUvarint(b, uint64(s.level))
}

// readState takes any last (a hit may come at any instant), and a level
// that the bucket holds: from empty to full.
func (k bucketKernel) readState(r *snapshot.Reader, s *bucketState, _ []struct{}) {
	s.last = r.Varint()
	s.level = int64(r.UvarintUpTo(uint64(k.capacity), "level"))
}
