package ingest

import (
	"math/rand/v2"
	"testing"
)

// The special SWAR test finds exactly the bytes a string scan must stop at.
func TestSpecial(t *testing.T) {
	stop := func(c byte) bool { return c < 0x20 || c == '"' || c == '\\' || c >= 0x7f }
	for c := range 256 {
		for pos := range 8 {
			w := uint64(0x6161616161616161)
			w = w&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			if got := special(w); got != stop(byte(c)) {
				t.Fatalf("special(%#x) = %v", w, got)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		w := r.Uint64()
		want := false
		for k := range 8 {
			want = want || stop(byte(w>>(8*k)))
		}
		if special(w) != want {
			t.Fatalf("special(%#x) = %v", w, !want)
		}
	}
}
