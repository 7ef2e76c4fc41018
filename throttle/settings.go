package throttle

import (
	"cmp"
	"fmt"
	"time"
)

// Bounds on the numbers of every algorithm. They keep every computation in
// 64-bit integers. Some algorithms have tighter ones of their own
// (MaxBuckets, MaxRepeatLimit).
const (
	MaxLimit  = 1_000_000            // limit and burst
	MaxWindow = 366 * 24 * time.Hour // window
)

// settings are the numbers of one use of an algorithm: a policy's, or the
// arguments of a standalone constructor. A zero resolution or burst stands
// for its default; an algorithm that takes neither ignores them.
type settings struct {
	limit              int
	window, resolution time.Duration
	burst              int
	similarity         int64 // similar: millionths
	minChars           int   // similar
	spike              spikeSettings
	// price is what a policy's message costs. Kernels take each hit's
	// cost as it comes; only Repeat, which keeps each occurrence's cost
	// unless every one costs 1 (price.unit), must know ahead.
	price price
}

// A FieldError says which setting of a policy is wrong and why.
type FieldError struct {
	Field string // "window", "rooms[1]", ...
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// checkLimitWindow is where every kernel constructor starts: the limit must
// be in 1..most, the window a positive whole number of milliseconds up to
// MaxWindow. It returns both as the kernels keep them.
func checkLimitWindow(s settings, most int) (limit, windowMs int64, err *FieldError) {
	if s.limit < 1 || s.limit > most {
		return 0, 0, fieldErr("limit", "%d is out of range (1 to %d)", s.limit, most)
	}
	if err := validDuration("window", s.window, MaxWindow); err != nil {
		return 0, 0, err
	}
	return int64(s.limit), s.window.Milliseconds(), nil
}

// checkBucket is checkLimitWindow for the two buckets (TokenBucket and
// GCRA), which also take a burst: at most MaxLimit, the limit when zero.
func checkBucket(s settings) (limit, windowMs, burst int64, err *FieldError) {
	if limit, windowMs, err = checkLimitWindow(s, MaxLimit); err != nil {
		return 0, 0, 0, err
	}
	if s.burst < 0 || s.burst > MaxLimit {
		return 0, 0, 0, fieldErr("burst", "%d is out of range (1 to %d)", s.burst, MaxLimit)
	}
	return limit, windowMs, int64(cmp.Or(s.burst, s.limit)), nil
}

func validDuration(field string, d, most time.Duration) *FieldError {
	switch {
	case d <= 0:
		return fieldErr(field, "%v must be positive", d)
	case d%time.Millisecond != 0:
		return fieldErr(field, "%v is not a whole number of milliseconds", d)
	case d > most:
		return fieldErr(field, "%v is longer than %v", d, most)
	}
	return nil
}
