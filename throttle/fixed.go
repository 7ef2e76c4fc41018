package throttle

import (
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
)

// AlgFixedWindow names FixedWindow in a Policy.
const AlgFixedWindow Algorithm = "fixed_window"

// FixedWindow counts a key's hits per calendar window: window w covers
// [w·W, (w+1)·W) in Unix time, so windows are aligned to the epoch (a 1m
// window starts on the minute). A hit of cost c (1 for one hit) is allowed
// while the current window's count plus c is at most the limit; every hit
// is recorded, allowed or not.
//
// It is the cheapest counter (one count and the window's number), and the
// crudest: a key can send limit hits at the end of one window and limit more
// at the start of the next. SlidingWindow and SlidingWindowCounter fix that.
//
// Catching up (advance) is lazy: a hit or read in a later window sees a
// count of 0. Retry-after is the start of the next window. A late hit in an
// earlier window is dropped, and a read at an instant before the key's
// current window is answered in that window.
type FixedWindow struct {
	k fixedKernel
	s fixedState
}

// NewFixedWindow returns a FixedWindow allowing limit hits per window. It
// panics unless 1 <= limit <= MaxLimit and window is a positive whole number
// of milliseconds, at most MaxWindow.
func NewFixedWindow(limit int, window time.Duration) *FixedWindow {
	k, err := newFixedKernel(settings{limit: limit, window: window})
	if err != nil {
		panic("throttle: NewFixedWindow: " + err.Error())
	}
	return &FixedWindow{k: k, s: k.fresh()}
}

// Decide reports whether one more hit would be allowed at now. It changes
// nothing.
func (f *FixedWindow) Decide(now time.Time) Verdict { return f.DecideN(now, 1) }

// DecideN reports whether a hit of cost n would be allowed at now. It
// changes nothing.
func (f *FixedWindow) DecideN(now time.Time, n int) Verdict {
	return decideCost(f.k, &f.s, nil, now.UnixMilli(), costOf(n))
}

// Hit decides at `at` as Decide would, then records the hit, allowed or not.
func (f *FixedWindow) Hit(at time.Time) Verdict { return f.HitN(at, 1) }

// HitN decides at `at` as DecideN would, then records the hit, n hits'
// worth, allowed or not.
func (f *FixedWindow) HitN(at time.Time, n int) Verdict { return decideThenHit(f.k, &f.s, nil, at, n) }

type fixedKernel struct {
	noExt
	limit int64
	w     int64 // window, ms
}

// newFixedKernel checks the settings of a fixed window and returns its
// kernel.
func newFixedKernel(s settings) (fixedKernel, *FieldError) {
	limit, w, err := checkLimitWindow(s, MaxLimit)
	return fixedKernel{limit: limit, w: w}, err
}

// fixedAlg is the row of FixedWindow in the table of algorithms.
var fixedAlg = algorithm{name: AlgFixedWindow, kernel: kernelsOf(newFixedKernel)}

type fixedState struct {
	count uint32
	win   int64 // the window count belongs to; chat.Never before the first hit
}

func (k fixedKernel) fresh() fixedState { return fixedState{win: chat.Never} }

// advance is the state at instant t; it is pure.
func (k fixedKernel) advance(s fixedState, t int64) fixedState {
	if wt := rolling.FloorDiv(t, k.w); s.win == chat.Never || wt > s.win {
		return fixedState{win: wt}
	}
	return s
}

func (k fixedKernel) decide(s *fixedState, _ []struct{}, now, cost int64) Verdict {
	a := k.advance(*s, now)
	c := int64(a.count)
	switch {
	case c+cost <= k.limit:
		return allowed(c, k.limit)
	case c == 0: // it alone is over the limit, and a new window holds 0 too
		return denied(c, k.limit, 0)
	}
	return denied(c, k.limit, (a.win+1)*k.w-now)
}

func (k fixedKernel) hit(s *fixedState, _ []struct{}, at, cost int64) bool {
	a := k.advance(*s, at)
	ok := int64(a.count)+cost <= k.limit
	if rolling.FloorDiv(at, k.w) == a.win {
		a.count = satAdd(a.count, cost)
	}
	*s = a
	return ok
}

func (k fixedKernel) unhit(s *fixedState, _ []struct{}, at, cost int64) {
	if rolling.FloorDiv(at, k.w) == s.win {
		s.count -= uint32(min(int64(s.count), cost))
	}
}

func (k fixedKernel) atRest(s *fixedState, _ []struct{}, now int64) bool {
	return k.advance(*s, now).count == 0
}

// keep keeps the count as it is: it counts every message, whatever the
// limit.
func (k fixedKernel) keep(settings, *fixedState, []struct{}, []struct{}) {}

func (k fixedKernel) appendState(b []byte, s *fixedState, _ []struct{}) []byte {
	b = snapshot.AppendVarint(b, s.win)
	return snapshot.AppendUvarint(b, uint64(s.count))
}

func (k fixedKernel) readState(r *snapshot.Reader, s *fixedState, _ []struct{}) {
	s.win = period(r, k.w)
	s.count = r.Uvarint32()
}
