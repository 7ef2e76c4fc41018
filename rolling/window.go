package rolling

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Limits on what a window may cost. A window's memory is per bucket, so the
// bucket count, not the size, is what is capped.
const (
	MinResolution = time.Second
	MaxBuckets    = 20_000 // 7d:1m is 10,080; 1d:5s is 17,280
	MaxWindows    = 16
)

// Window is one configured window: Size split into buckets of Res.
type Window struct {
	Name string        // the SIZE text as given, e.g. "1m" or "7d"
	Size time.Duration // whole multiple of Res
	Res  time.Duration // at least MinResolution, a whole number of milliseconds
}

// Buckets is the number of buckets n in the window.
func (w Window) Buckets() int { return int(w.Size / w.Res) }

// Bucket is b(t) = floor(t / Res) for t in Unix milliseconds.
func (w Window) Bucket(t int64) int64 { return FloorDiv(t, w.Res.Milliseconds()) }

// FloorDiv divides rounding toward negative infinity, so that instants before
// the epoch fall in the right bucket too.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// DefaultWindows is the window list used when none is configured.
const DefaultWindows = "1m,5m,1h"

// ParseWindows parses a comma-separated list of windows, each SIZE or
// SIZE:RESOLUTION (see ParseWindow). Names must be distinct.
func ParseWindows(s string) ([]Window, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("no windows given (example: 1m,5m,1h or 7d:1h)")
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxWindows {
		return nil, fmt.Errorf("%d windows given, at most %d", len(parts), MaxWindows)
	}
	ws := make([]Window, 0, len(parts))
	seen := make(map[string]bool, len(parts))
	for _, p := range parts {
		w, err := ParseWindow(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		if seen[w.Name] {
			return nil, fmt.Errorf("window %q given twice", w.Name)
		}
		seen[w.Name] = true
		ws = append(ws, w)
	}
	return ws, nil
}

// ParseWindow parses SIZE or SIZE:RESOLUTION. Both are Go durations that
// may also use d for days (7d, 1d12h). RESOLUTION defaults to SIZE/60; for
// windows under a minute, where SIZE/60 would be finer than the 1s minimum,
// it defaults to 1s instead.
func ParseWindow(s string) (Window, error) {
	sizeText, resText, hasRes := strings.Cut(s, ":")
	size, err := ParseDuration(sizeText)
	if err != nil {
		return Window{}, fmt.Errorf("window %q: size: %w", s, err)
	}
	w := Window{Name: sizeText, Size: size}
	switch {
	case hasRes:
		if w.Res, err = ParseDuration(resText); err != nil {
			return Window{}, fmt.Errorf("window %q: resolution: %w", s, err)
		}
	case size/60 < MinResolution && size%MinResolution == 0:
		w.Res = MinResolution
	default:
		w.Res = size / 60
		if size%60 != 0 {
			return Window{}, fmt.Errorf("window %q: default resolution SIZE/60 is not a whole number of milliseconds; give one, as in %s:1s", s, sizeText)
		}
	}
	if err := w.Validate(); err != nil {
		return Window{}, fmt.Errorf("window %q: %w", s, err)
	}
	return w, nil
}

// Validate reports what makes w's geometry unusable, if anything: a size
// that is not positive, a resolution under MinResolution or not whole milliseconds, a size that is
// not a whole multiple of it, or more than MaxBuckets buckets.
func (w Window) Validate() error {
	switch {
	case w.Size <= 0:
		return errors.New("size must be positive")
	case w.Res < MinResolution:
		return fmt.Errorf("resolution %v is below the minimum %v", w.Res, MinResolution)
	case w.Res%time.Millisecond != 0:
		return fmt.Errorf("resolution %v is not a whole number of milliseconds", w.Res)
	case w.Size%w.Res != 0:
		return fmt.Errorf("size %v is not a whole multiple of resolution %v", w.Size, w.Res)
	case w.Size/w.Res > MaxBuckets:
		return fmt.Errorf("%d buckets (size/resolution) is more than %d; use a coarser resolution", w.Size/w.Res, MaxBuckets)
	}
	return nil
}

// FormatDuration writes d as a person writes it in the configuration, and
// ParseDuration reads it back: time.Duration's text without trailing zero
// units, 1m and 1h30m, not 1m0s and 1h30m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = s[:len(s)-2]
		}
	}
	return s
}

// ParseDuration is time.ParseDuration plus the unit d (24h): "7d", "1d12h",
// "1.5d". It is the one reader of durations in chatpulse's configuration
// (windows and throttle policies), and refuses a sign: no span there can be
// negative.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty duration")
	}
	if s[0] == '-' || s[0] == '+' {
		return 0, fmt.Errorf("%q: no sign allowed", s)
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return 0, fmt.Errorf("%q is not a duration (missing unit, like %ss)", s, s)
	}
	if !strings.Contains(s, "d") {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (examples: 90s, 5m, 1h, 7d)", s)
		}
		return d, nil
	}
	// Split around each "<number>d" and convert it to hours; the rest is
	// left to time.ParseDuration.
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] == '.' || rest[i] >= '0' && rest[i] <= '9') {
			i++
		}
		j := i
		for j < len(rest) && !(rest[j] == '.' || rest[j] >= '0' && rest[j] <= '9') {
			j++
		}
		num, unit := rest[:i], rest[i:j]
		if num == "" || unit == "" {
			return 0, fmt.Errorf("%q is not a duration (examples: 90s, 5m, 1h, 7d)", s)
		}
		var part time.Duration
		if unit == "d" {
			days, err := strconv.ParseFloat(num, 64)
			if err != nil || days > float64(1<<63-1)/float64(24*time.Hour) {
				return 0, fmt.Errorf("%q is not a duration (examples: 90s, 5m, 1h, 7d)", s)
			}
			part = time.Duration(days * float64(24*time.Hour))
		} else {
			d, err := time.ParseDuration(num + unit)
			if err != nil {
				return 0, fmt.Errorf("%q is not a duration (examples: 90s, 5m, 1h, 7d)", s)
			}
			part = d
		}
		if total > 1<<63-1-part {
			return 0, fmt.Errorf("%q is too long", s)
		}
		total += part
		rest = rest[j:]
	}
	return total, nil
}
