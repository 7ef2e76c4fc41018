package throttle

import (
	"time"
	"unicode"
	"unicode/utf8"
)

// Repeat is the logger-style limiter: it counts occurrences of the same
// text, and denies the next one once limit of them lie in the window. With
// limit 1 it is "show each message at most once per window": any earlier
// occurrence in the window denies the next.
//
// A Repeat tracks one text (a Set keeps one per key and text, keyed by a
// hash of the normalized text, never the text itself). Time is continuous,
// to the millisecond: an occurrence at p is in the window at T iff
// T - W < p <= T, the same [T-W+1, T] rule as the bucketed windows, with
// millisecond buckets.
//
// The state is the times of the newest limit occurrences, oldest first: with
// limit 1, just the last-seen time. That is all the decision needs, since
// one more is denied iff the limit-th newest occurrence is still in the
// window, and it frees the moment that occurrence leaves: retry-after is
// oldest kept + W - now. The price is Count: it is exact up to the limit and
// stops there (Count <= Limit), because older occurrences are not kept.
//
// Catching up needs no work: the kept times age out by comparison. A late
// hit is inserted in time order if it is still in the window and among the
// newest limit; otherwise it is dropped. A read at an instant before the
// newest occurrence is answered at that occurrence.
type Repeat struct {
	k     repeatKernel
	s     repeatState
	times []int64
}

// NewRepeat returns a Repeat denying the next occurrence once limit
// occurrences lie in the window. It panics unless 1 <= limit <= 100 and
// window is a positive whole number of milliseconds.
func NewRepeat(limit int, window time.Duration) *Repeat {
	k := mustKernel(Policy{Algorithm: AlgRepeat, Limit: limit, Window: window}).(repeatKernel)
	return &Repeat{k: k, s: k.fresh(), times: make([]int64, k.limit)}
}

// Decide reports whether one more occurrence would be allowed at now. It
// changes nothing.
func (r *Repeat) Decide(now time.Time) Verdict { return r.k.decide(&r.s, r.times, now.UnixMilli()) }

// Hit decides at `at` as Decide would, then records the occurrence.
func (r *Repeat) Hit(at time.Time) Verdict {
	t := at.UnixMilli()
	v := r.k.decide(&r.s, r.times, t)
	r.k.hit(&r.s, r.times, t)
	return v
}

type repeatKernel struct {
	limit int64
	w     int64 // window, ms
}

type repeatState struct {
	n int32 // occurrences kept in times[:n], oldest first
}

func (k repeatKernel) fresh() repeatState { return repeatState{} }

// advance returns the instant a read at t is answered at, and how many
// kept occurrences are in the window then. It is pure.
func (k repeatKernel) advance(s *repeatState, times []int64, t int64) (at, count int64) {
	if s.n == 0 {
		return t, 0
	}
	kept := times[:s.n]
	at = max(t, kept[len(kept)-1])
	i := 0
	for i < len(kept) && kept[i] <= at-k.w {
		i++
	}
	return at, int64(len(kept) - i)
}

func (k repeatKernel) decide(s *repeatState, times []int64, now int64) Verdict {
	_, count := k.advance(s, times, now)
	if count < k.limit {
		return allowed(count, k.limit)
	}
	// All limit kept occurrences are in the window; the oldest frees first.
	return denied(count, k.limit, times[0]+k.w-now)
}

func (k repeatKernel) hit(s *repeatState, times []int64, at int64) bool {
	now, count := k.advance(s, times, at)
	ok := count < k.limit
	if at <= now-k.w {
		return ok // late beyond the window
	}
	n := int(s.n)
	if int64(n) == k.limit {
		if at <= times[0] {
			return ok // older than every kept occurrence: never decides anything
		}
		copy(times, times[1:n])
		n--
	}
	i := n
	for i > 0 && times[i-1] > at {
		times[i] = times[i-1]
		i--
	}
	times[i] = at
	s.n = int32(n + 1)
	return ok
}

func (k repeatKernel) atRest(s *repeatState, times []int64, now int64) bool {
	return s.n == 0 || times[s.n-1] <= now-k.w
}

// FNV-1a, 64 bit.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// textHash returns a hash of text after normalization, and false if nothing
// is left of it: leading and trailing white space is trimmed, every run of
// Unicode white space becomes one space, and case is folded (each rune is
// replaced by the smallest rune of its unicode.SimpleFold orbit, so two texts
// normalize alike exactly when strings.EqualFold would say their runes
// match). The hash is FNV-1a over the UTF-8 of the normalized text, computed
// as it is normalized: no copy of the text is made or kept. An invalid UTF-8
// byte counts as U+FFFD.
func textHash(text string) (uint64, bool) {
	h := uint64(fnvOffset)
	started, space := false, false
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(text); {
		r, size := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(text[i:])
		}
		i += size
		if isSpace(r) {
			space = started
			continue
		}
		if space {
			h = (h ^ ' ') * fnvPrime
			space = false
		}
		started = true
		r = fold(r)
		if r < utf8.RuneSelf {
			h = (h ^ uint64(r)) * fnvPrime
			continue
		}
		for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
			h = (h ^ uint64(c)) * fnvPrime
		}
	}
	return h, started
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

// fold maps r to the smallest rune that case-folds to it.
func fold(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		}
		return r
	}
	m := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		m = min(m, f)
	}
	return m
}
