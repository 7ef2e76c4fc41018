package throttle

import (
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode"
)

// normalized is textHash's normalization, the slow and obvious way.
func normalized(s string) string {
	var b strings.Builder
	for i, f := range strings.FieldsFunc(s, unicode.IsSpace) {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, r := range f {
			b.WriteRune(fold(r))
		}
	}
	return b.String()
}

// A stream hashes what it is written as hash hashes it at once, however
// it is cut: around every length where hash changes its way (4, 8, 16,
// 48 and its multiples) and with pieces of every size.
func TestStreamIsHash(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hk := newHashKey()
	data := make([]byte, 400)
	for n := range len(data) {
		for range 20 {
			for i := range data[:n] {
				data[i] = byte(r.Uint32())
			}
			var s stream
			s.reset(hk, hk.text)
			for rest := data[:n]; len(rest) > 0; {
				k := min(len(rest), r.IntN(3*48))
				s.write(rest[:k])
				rest = rest[k:]
			}
			if got, want := s.sum(), hk.hash(hk.text, data[:n]); got != want {
				t.Fatalf("%d bytes: stream %x, hash %x", n, got, want)
			}
		}
	}
}

// The hash depends on every byte, the length and the key: no collision
// among inputs that differ in one bit, in length only (zeros), or in key.
func TestHashSpreads(t *testing.T) {
	hk, other := newHashKey(), newHashKey()
	seen := map[uint64]string{}
	add := func(h uint64, what string) {
		if prev, dup := seen[h]; dup {
			t.Fatalf("%s and %s hash alike", prev, what)
		}
		seen[h] = what
	}
	zeros := make([]byte, 200)
	for n := range len(zeros) {
		add(hk.hash(hk.name, zeros[:n]), "zeros")
		add(other.hash(other.name, zeros[:n]), "zeros, other key")
		add(hk.hash(hk.text, zeros[:n]), "zeros, text seed")
	}
	b := []byte(strings.Repeat("0123456789abcdef", 8))
	for n := 1; n <= len(b); n += 7 {
		for bit := range 8 * n {
			b[bit/8] ^= 1 << (bit % 8)
			add(hk.hash(hk.name, b[:n]), string(b[:n]))
			b[bit/8] ^= 1 << (bit % 8)
		}
	}
}

// FuzzTextHash: textHash of any text is the hash of its normalization,
// and reports whether anything is left of it.
func FuzzTextHash(f *testing.F) {
	for _, s := range []string{"", " ", "Hello  World", strings.Repeat("ab ", 40), strings.Repeat("\u212a\u00a0", 50) + "\xe2\x82"} {
		f.Add(s)
	}
	hk := newHashKey()
	f.Fuzz(func(t *testing.T, s string) {
		want := normalized(s)
		h, ok := hk.textHash(s)
		if ok != (want != "") || h != hk.hash(hk.text, []byte(want)) {
			t.Fatalf("textHash(%q) = %x, %v; want the hash of %q", s, h, ok, want)
		}
	})
}

// BenchmarkHashSideBySide compares the Set's keyed hash with hash/maphash,
// which the Set used before it had to save its key, in alternating chunks
// of 4096 hashes in one process: of the names of 100,000 users, and of the
// texts of benchStream (textHash: normalized, then hashed, against the
// same normalization hashed by maphash.Bytes). It reports each one's ns
// per hash and their ratio (keyed/maphash: below 1 means the keyed hash
// is faster).
//
//	go test -run='^$' -bench=HashSideBySide -benchtime=20000000x ./throttle/
func BenchmarkHashSideBySide(b *testing.B) {
	hk, seed := newHashKey(), maphash.MakeSeed()
	var texts []string
	for _, e := range benchStream(1<<12, 3000) {
		texts = append(texts, e.text)
	}
	var sink uint64
	for _, c := range []struct {
		name           string
		keyed, maphash func(i int)
	}{
		{"names", func(i int) { sink += hk.nameHash(benchNames[i%benchKeys]) }, func(i int) { sink += maphash.String(seed, benchNames[i%benchKeys]) }},
		{"texts", func(i int) {
			h, _ := hk.textHash(texts[i%len(texts)])
			sink += h
		}, func(i int) {
			var buf [normBuf]byte
			n, afterSpace := normalize(&buf, 0, texts[i%len(texts)], 1)
			sink += maphash.Bytes(seed, buf[:n-afterSpace&min(n, 1)])
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			run := func(f func(int), start, end int) time.Duration {
				t0 := time.Now()
				for i := start; i < end; i++ {
					f(i)
				}
				return time.Since(t0)
			}
			var keyed, old time.Duration
			for start, n := 0, 0; start < b.N; start, n = start+4096, n+1 {
				end := min(start+4096, b.N)
				if n%2 == 0 {
					keyed += run(c.keyed, start, end)
					old += run(c.maphash, start, end)
				} else {
					old += run(c.maphash, start, end)
					keyed += run(c.keyed, start, end)
				}
			}
			b.ReportMetric(float64(keyed.Nanoseconds())/float64(b.N), "keyed-ns/hash")
			b.ReportMetric(float64(old.Nanoseconds())/float64(b.N), "maphash-ns/hash")
			b.ReportMetric(float64(keyed)/float64(old), "keyed/maphash")
		})
	}
	if sink == 0 {
		b.Log(sink)
	}
}
