package ingest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// parseRFC3339 agrees with the reference's time.Parse (made strict) on
// random instants of years 0..9999, in random zones and precisions.
func TestParseRFC3339(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	lo, hi := ms("0000-01-01T00:00:00Z"), ms("9999-12-31T23:59:59.999999999Z")
	for range 100000 {
		s := randomTimestamp(r, lo+r.Int64N(hi-lo))
		want, wantOK := refParseTime(s)
		got, ok := parseRFC3339(s)
		if ok != wantOK || ok && got != want.UnixMilli() {
			t.Fatalf("parseRFC3339(%q) = %d, %v; reference: %d, %v", s, got, ok, want.UnixMilli(), wantOK)
		}
	}
}

// randomTimestamp writes the instant ms (plus sub-ms noise) in RFC 3339
// with 0..12 fraction digits and a random zone.
func randomTimestamp(r *rand.Rand, ms int64) string {
	t := time.UnixMilli(ms).Add(time.Duration(r.IntN(1e6))).UTC()
	if r.IntN(3) > 0 {
		off := (r.IntN(48*60) - 24*60 + 1) * 60
		t = t.In(time.FixedZone("", off))
	}
	s := t.Format("2006-01-02T15:04:05Z07:00")
	if n := r.IntN(13); n > 0 {
		frac := fmt.Sprintf("%09d000", t.Nanosecond())[:n]
		s = s[:19] + "." + frac + s[19:]
	}
	return s
}
