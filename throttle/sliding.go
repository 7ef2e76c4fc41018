package throttle

import (
	"cmp"
	"math"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
)

// AlgSlidingWindow names SlidingWindow in a Policy.
const AlgSlidingWindow Algorithm = "sliding_window"

// The resolution of a sliding window.
const (
	DefaultResolution = time.Second // when none is given
	MaxBuckets        = 3600        // window/resolution: 4 bytes each per key
)

// SlidingWindow counts a key's hits exactly, in buckets of a fixed
// resolution r, over a window of n = window/r buckets: the windows of
// docs/contract.md section 2.
//
// The bucket of an instant t (Unix time) is b(t) = floor(t/r), so buckets are
// aligned to the epoch. Read at T, the window holds the hits whose bucket lies
// in [b(T)-n+1, b(T)]: a 10s window at 1s resolution read at 12.3s counts the
// seconds 3 to 12, both included. One more hit is allowed while the count is
// below the limit. Every hit is recorded, allowed or not, so the count is the
// exact number of messages in the window (12 with a limit of 10, if 12 came).
// A hit of cost c counts c in its bucket, and is allowed while the count
// plus c is at most the limit.
//
// The state is a ring of n counters plus their running total: bucket j lives
// in slot j mod n, and last is the newest bucket written. Before a hit writes
// bucket b > last, advance empties the slots of buckets last+1..b, which still
// hold hits from n buckets earlier, and subtracts them from the total; a gap
// of n buckets or more empties the whole ring in one step. So memory is n
// counters however many hits arrive, and a hit costs O(1) amortized. A read
// must not write, so it subtracts the expired buckets from the total as it
// goes instead (held).
//
// Retry-after comes from the buckets: the count falls only when whole buckets
// leave the window. Walk the buckets still held from the oldest, subtracting
// each, until the count plus the hit's cost is at most the limit; if that
// happens at bucket j, the window stops seeing j at the start of bucket j+n,
// and that instant, (j+n)·r, is exactly when the hit is allowed. (A bucket
// holds at most 2^32-1, thousands of times any limit: one that would hold
// more holds that, and every answer is as it would have been.)
//
// Late hits: a hit whose bucket is older than last still goes into its bucket
// while that bucket is inside the window [last-n+1, last]; an older one is
// dropped, since no later read could count it. A read at an instant older
// than bucket last is answered at bucket last.
type SlidingWindow struct {
	k    slidingKernel
	s    slidingState
	ring []uint32
}

// NewSlidingWindow returns a SlidingWindow allowing limit hits per window,
// counted in buckets of resolution; resolution 0 means DefaultResolution.
// It panics unless 1 <= limit <= MaxLimit and window is a positive whole
// multiple of resolution (whole milliseconds, at most MaxWindow and
// MaxBuckets buckets).
func NewSlidingWindow(limit int, window, resolution time.Duration) *SlidingWindow {
	k, err := newSlidingKernel(settings{limit: limit, window: window, resolution: resolution})
	if err != nil {
		panic("throttle: NewSlidingWindow: " + err.Error())
	}
	return &SlidingWindow{k: k, s: k.fresh(), ring: make([]uint32, k.stride())}
}

// Decide reports whether one more hit would be allowed at now. It changes
// nothing.
func (w *SlidingWindow) Decide(now time.Time) Verdict { return w.DecideN(now, 1) }

// DecideN reports whether a hit of cost n would be allowed at now. It
// changes nothing.
func (w *SlidingWindow) DecideN(now time.Time, n int) Verdict {
	return decideCost(w.k, &w.s, w.ring, now.UnixMilli(), costOf(n))
}

// Hit decides at `at` as Decide would, then records the hit, allowed or not.
func (w *SlidingWindow) Hit(at time.Time) Verdict { return w.HitN(at, 1) }

// HitN decides at `at` as DecideN would, then records the hit, n hits'
// worth, allowed or not.
func (w *SlidingWindow) HitN(at time.Time, n int) Verdict {
	return decideThenHit(w.k, &w.s, w.ring, at, n)
}

type slidingKernel struct {
	limit int64
	n     int64 // buckets in the window
	res   int64 // width of a bucket, ms
}

// newSlidingKernel checks the settings of a sliding window and returns its
// kernel.
func newSlidingKernel(s settings) (slidingKernel, *FieldError) {
	limit, w, err := checkLimitWindow(s, MaxLimit)
	if err != nil {
		return slidingKernel{}, err
	}
	res := cmp.Or(s.resolution, DefaultResolution)
	if err := validDuration("resolution", res, s.window); err != nil {
		return slidingKernel{}, err
	}
	// When the two do not fit, the one that was set is to blame.
	field := "window"
	if s.resolution != 0 {
		field = "resolution"
	}
	if s.window%res != 0 {
		return slidingKernel{}, fieldErr(field, "window %v is not a whole multiple of resolution %v", s.window, res)
	}
	if n := s.window / res; n > MaxBuckets {
		return slidingKernel{}, fieldErr(field, "window %v at resolution %v is %d buckets, more than %d: use a larger resolution", s.window, res, n, MaxBuckets)
	}
	r := res.Milliseconds()
	return slidingKernel{limit: limit, n: w / r, res: r}, nil
}

// slidingAlg is the row of SlidingWindow in the table of algorithms.
var slidingAlg = algorithm{name: AlgSlidingWindow, resolution: true, kernel: kernelsOf(newSlidingKernel)}

func (k slidingKernel) stride() int { return int(k.n) }

// slot is the ring slot of the bucket of at.
func (k slidingKernel) slot(at int64) int { return int(floorMod(rolling.FloorDiv(at, k.res), k.n)) }

type slidingState struct {
	total int64 // sum of the ring: the hits of buckets [last-n+1, last]
	last  int64 // newest bucket written; chat.Never before the first hit
}

func (k slidingKernel) fresh() slidingState { return slidingState{last: chat.Never} }

// held returns the hits a read at bucket b (b >= s.last) sees: the total,
// less the buckets that left the window between s.last and b.
func (k slidingKernel) held(s *slidingState, ring []uint32, b int64) int64 {
	oldest := b - k.n + 1
	if oldest > s.last {
		return 0
	}
	count := s.total
	for j := s.last - k.n + 1; j < oldest; j++ {
		count -= int64(ring[floorMod(j, k.n)])
	}
	return count
}

// advance moves the ring to bucket b > s.last, emptying the slots of the
// buckets that leave. It is the only place where a key's clock moves.
func (k slidingKernel) advance(s *slidingState, ring []uint32, b int64) {
	if s.last == chat.Never || b-s.last >= k.n {
		clear(ring)
		s.total = 0
	} else {
		for j := s.last + 1; j <= b; j++ {
			i := floorMod(j, k.n)
			s.total -= int64(ring[i])
			ring[i] = 0
		}
	}
	s.last = b
}

func (k slidingKernel) decide(s *slidingState, ring []uint32, now, cost int64) Verdict {
	if s.total == 0 {
		if cost <= k.limit {
			return allowed(0, k.limit)
		}
		return denied(0, k.limit, 0) // it alone is over the limit
	}
	b := max(rolling.FloorDiv(now, k.res), s.last)
	count := k.held(s, ring, b)
	if count+cost <= k.limit {
		return allowed(count, k.limit)
	}
	fit := k.limit - min(cost, k.limit) // the count at which it fits
	if count <= fit {
		return denied(count, k.limit, 0) // it alone is over the limit
	}
	// The loop ends by bucket s.last at the latest, where c reaches 0.
	c := count
	for j := max(b-k.n+1, s.last-k.n+1); ; j++ {
		c -= int64(ring[floorMod(j, k.n)])
		if c <= fit {
			return denied(count, k.limit, (j+k.n)*k.res-now)
		}
	}
}

func (k slidingKernel) hit(s *slidingState, ring []uint32, at, cost int64) bool {
	b := rolling.FloorDiv(at, k.res)
	if s.last == chat.Never || b > s.last {
		k.advance(s, ring, b)
	}
	ok := s.total+cost <= k.limit // the count at bucket s.last
	if b <= s.last-k.n {
		return ok // late beyond the window: no read could count it
	}
	i := floorMod(b, k.n)
	add := min(cost, int64(math.MaxUint32-ring[i]))
	ring[i] += uint32(add)
	s.total += add
	return ok
}

func (k slidingKernel) unhit(s *slidingState, ring []uint32, at, cost int64) {
	b := rolling.FloorDiv(at, k.res)
	if b <= s.last-k.n || b > s.last {
		return // left the window (or never in it)
	}
	i := floorMod(b, k.n)
	sub := min(cost, int64(ring[i]))
	ring[i] -= uint32(sub)
	s.total -= sub
}

func (k slidingKernel) atRest(s *slidingState, ring []uint32, now int64) bool {
	return s.total == 0 || rolling.FloorDiv(now, k.res)-k.n+1 > s.last
}

// keep keeps the ring as it is: it counts every message, whatever the
// limit.
func (k slidingKernel) keep(_ settings, _ *slidingState, fromExt, ring []uint32) { copy(ring, fromExt) }

// A saved sliding window is its newest bucket, then its ring, in which
// most buckets are usually empty: for each bucket that holds hits, how
// many empty ones come before it (after the one before), then its count;
// and last, how many empty ones end the ring. The total is the sum.
func (k slidingKernel) appendState(b []byte, s *slidingState, ring []uint32) []byte {
	b = snapshot.AppendVarint(b, s.last)
	next := 0
	for i, c := range ring {
		if c != 0 {
			b = snapshot.AppendUvarint(b, uint64(i-next))
			b = snapshot.AppendUvarint(b, uint64(c))
			next = i + 1
		}
	}
	return snapshot.AppendUvarint(b, uint64(len(ring)-next))
}

// readState takes any ring, and a newest bucket that an instant in int64
// has. (The total must be the ring's sum: decide's walk to the bucket that
// frees ends only then.)
func (k slidingKernel) readState(r *snapshot.Reader, s *slidingState, ring []uint32) {
	s.last = period(r, k.res)
	for next := 0; r.Err() == nil; {
		i := next + int(r.UvarintUpTo(uint64(len(ring)-next), "empty buckets"))
		if i == len(ring) {
			return
		}
		c := r.Uvarint32()
		if c == 0 {
			r.Fail("an empty bucket among those that hold hits")
		}
		ring[i] = c
		s.total += int64(c)
		next = i + 1
	}
}
