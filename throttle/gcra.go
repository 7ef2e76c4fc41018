package throttle

import (
	"math"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
)

// AlgGCRA names GCRA in a Policy.
const AlgGCRA Algorithm = "gcra"

// GCRA (the generic cell rate algorithm) is a token bucket that keeps a
// single timestamp per key instead of a level and a time.
//
// Hits are spaced by the emission interval I = window/limit. The state is
// TAT, the theoretical arrival time: the instant at which the key would be
// back to a full bucket if it sent nothing more. A hit at t is allowed iff
// max(TAT, t) - t <= τ, where the burst tolerance τ = (burst-1)·I lets burst
// hits through at once; an allowed hit moves TAT to max(TAT, t) + I, a
// denied one changes nothing (not charged, as in TokenBucket). The two
// algorithms give the same answers: the tokens in use are
// ceil((max(TAT, t) - t)/I), and a hit is denied exactly when all burst of
// them are. Retry-after is the instant at which TAT - t falls to τ, that is
// TAT - τ. A hit of cost c is c hits at once: allowed iff
// max(TAT, t) - t <= (burst-c)·I, it moves TAT by c·I, and it may come at
// TAT - (burst-c)·I.
//
// Time runs in units of 1/limit millisecond, so that I = window in
// milliseconds and every quantity is an integer and every answer exact.
//
// GCRA keeps no last-hit time, so a late hit (or a read at an earlier
// instant) is decided at its own instant, where TAT is further away: that is
// never more permissive than deciding it at the newest instant.
type GCRA struct {
	k gcraKernel
	s gcraState
}

// NewGCRA returns a GCRA allowing limit hits per window with bursts of up to
// burst hits; burst 0 means limit. It panics unless 1 <= limit <= MaxLimit,
// 0 <= burst <= MaxLimit and window is a positive whole number of
// milliseconds, at most MaxWindow.
func NewGCRA(limit int, window time.Duration, burst int) *GCRA {
	k, err := newGCRAKernel(settings{limit: limit, window: window, burst: burst})
	if err != nil {
		panic("throttle: NewGCRA: " + err.Error())
	}
	return &GCRA{k: k, s: k.fresh()}
}

// Decide reports whether one more hit would be allowed at now. It changes
// nothing.
func (g *GCRA) Decide(now time.Time) Verdict { return g.DecideN(now, 1) }

// DecideN reports whether a hit of cost n (n hits at once) would be
// allowed at now. It changes nothing.
func (g *GCRA) DecideN(now time.Time, n int) Verdict {
	return decideCost(g.k, &g.s, nil, now.UnixMilli(), costOf(n))
}

// Hit decides at `at` as Decide would, then records the hit if allowed.
func (g *GCRA) Hit(at time.Time) Verdict { return g.HitN(at, 1) }

// HitN decides at `at` as DecideN would, then records the hit if allowed.
func (g *GCRA) HitN(at time.Time, n int) Verdict { return decideThenHit(g.k, &g.s, nil, at, n) }

type gcraKernel struct {
	noExt
	limit int64 // units per ms
	burst int64
	i     int64 // emission interval in units: the window in ms
	tau   int64 // burst tolerance in units: (burst-1)·i
}

// newGCRAKernel checks the settings of a GCRA and returns its kernel.
func newGCRAKernel(s settings) (gcraKernel, *FieldError) {
	limit, w, burst, err := checkBucket(s)
	if err != nil {
		return gcraKernel{}, err
	}
	return gcraKernel{limit: limit, burst: burst, i: w, tau: (burst - 1) * w}, nil
}

// gcraAlg is the row of GCRA in the table of algorithms.
var gcraAlg = algorithm{name: AlgGCRA, burst: true, kernel: kernelsOf(newGCRAKernel)}

type gcraState struct {
	tat int64 // theoretical arrival time, in units; chat.Never: never used
}

func (k gcraKernel) fresh() gcraState { return gcraState{tat: chat.Never} }

// units converts Unix milliseconds to units, saturating far outside the
// range of real event times rather than wrapping around.
func (k gcraKernel) units(t int64) int64 {
	if lim := math.MaxInt64 / 2 / k.limit; t > lim {
		t = lim
	} else if t < -lim {
		t = -lim
	}
	return t * k.limit
}

func (k gcraKernel) decide(s *gcraState, _ []struct{}, now, cost int64) Verdict {
	t := k.units(now)
	used := max(s.tat, t) - t
	count := ceilDiv(used, k.i)
	if cost <= k.burst && used <= (k.burst-cost)*k.i {
		return allowed(count, k.burst)
	}
	// A hit of cost c = min(cost, burst) fits from TAT - (burst-c)·I on.
	fit := s.tat - (k.burst-min(cost, k.burst))*k.i
	if fit <= t { // it alone is over the burst (TAT may be chat.Never)
		return denied(min(count, k.burst), k.burst, 0)
	}
	return denied(min(count, k.burst), k.burst, ceilDiv(fit, k.limit)-now)
}

func (k gcraKernel) hit(s *gcraState, _ []struct{}, at, cost int64) bool {
	t := k.units(at)
	tat := max(s.tat, t)
	ok := cost <= k.burst && tat-t <= (k.burst-cost)*k.i
	if ok {
		s.tat = tat + cost*k.i
	}
	return ok
}

// unhit moves the TAT back by cost emission intervals. If the bucket was
// full before the hit, the TAT lands on the hit's instant instead of where
// it was: the same answers from then on.
func (k gcraKernel) unhit(s *gcraState, _ []struct{}, _, cost int64) {
	if s.tat != chat.Never {
		s.tat -= min(cost, k.burst) * k.i
	}
}

func (k gcraKernel) atRest(s *gcraState, _ []struct{}, now int64) bool {
	return s.tat <= k.units(now)
}

// keep keeps the TAT, the instant at which the key is back to a full
// bucket, rounded up (the stricter way) to the new units of 1/limit
// millisecond: how long a key waits to be full again is the same, and how
// many tokens it has in use then follows from the new rate and burst.
func (k gcraKernel) keep(old settings, s *gcraState, _, _ []struct{}) {
	if s.tat == chat.Never {
		return
	}
	from := int64(old.limit)
	// s.tat = q·from + r; q, in ms, saturates as units does.
	lim := math.MaxInt64 / 2 / k.limit
	q := min(max(rolling.FloorDiv(s.tat, from), -lim), lim)
	lo, hi := k.tatRange()
	s.tat = min(max(q*k.limit+ceilDiv(floorMod(s.tat, from)*k.limit, from), lo), hi)
}

// tatRange is the range of the TATs that hits can set: max(TAT, t) + I
// with TAT - t <= τ before it, and t in units.
func (k gcraKernel) tatRange() (lo, hi int64) {
	return k.units(math.MinInt64) + k.i, k.units(math.MaxInt64) + k.tau + k.i
}

func (k gcraKernel) appendState(b []byte, s *gcraState, _ []struct{}) []byte {
	return snapshot.AppendVarint(b, s.tat)
}

// readState takes a TAT in tatRange, or chat.Never.
func (k gcraKernel) readState(r *snapshot.Reader, s *gcraState, _ []struct{}) {
	s.tat = r.Varint()
	if lo, hi := k.tatRange(); s.tat != chat.Never && (s.tat < lo || s.tat > hi) {
		r.Fail("TAT %d is out of range (%d to %d)", s.tat, lo, hi)
	}
}
