package throttle

import (
	"slices"
	"unicode"
	"unicode/utf8"
)

// Word pairs and fingerprints: what algorithm similar compares texts by
// (docs/contract.md section 15).
//
// A text's words are its runs of letters and digits (unicode.IsLetter,
// unicode.IsDigit), lower-cased rune by rune (unicode.ToLower); anything
// else separates them, and an invalid UTF-8 byte is a separator too. Its
// word pairs are each word with the next one, in order. Two texts are
// alike when the pairs both have are at least `similarity` of the pairs
// either has (the Jaccard index of the two sets). A text of fewer than
// two words has no pair, and is alike to nothing.
//
// A fingerprint is that set as 32-bit keyed hashes, ascending: every pair
// of a text of at most simK distinct pairs (exact), or the simK smallest
// hashes of a longer one (cut: a bottom-k sketch, a sample of its pairs).
// It never holds the text. Two exact fingerprints give the share exactly
// (unless two pairs' hashes collide: 1 in 2^32 for two given pairs). If
// either is cut, share estimates it from the simK smallest hashes of the
// union, a sample without replacement of the union's pairs: for each of
// them, whether both texts have it.

// simK is the most pair hashes a fingerprint holds: 512 bytes.
const simK = 128

// A fingerprint is the set of a text's word pairs: h holds the hashes of
// all of them, or, if cut, the simK smallest.
type fingerprint struct {
	h   []uint32
	cut bool
}

// A sketch is a fingerprint being made, on the stack: a collector whose
// values, once finished, are the fingerprint's hashes (v[:n], ascending).
// The hashes are collected where they are kept: nothing is copied, and
// one buffer is cleared per message, not two.
type sketch struct {
	collector
}

func (s *sketch) fingerprint() fingerprint {
	return fingerprint{h: s.v[:s.n:s.n], cut: s.cut}
}

// wordBuf is how much of a word is hashed at once: a longer word is hashed
// a piece at a time, each piece's hash the seed of the next.
const wordBuf = 64

// pairsOf sets s to the fingerprint of text, with the hash key h.
func (h *hashKey) pairsOf(text string, s *sketch) {
	c := &s.collector
	c.n, c.cut, c.bound = 0, false, 0
	var buf [wordBuf + utf8.UTFMax]byte
	seed := h.text ^ 0x7061697273  // "pairs": apart from textHash's
	n, w := 0, seed                // the word so far: buf[:n], from seed w
	prev, have := uint64(0), false // the word before, if any
	end := func() {
		if n == 0 && w == seed {
			return
		}
		word := h.hash(w, buf[:n])
		if have {
			c.add(uint32(mix(prev^h.k[1], word^h.k[2]) >> 32))
		}
		prev, have, n, w = word, true, 0, seed
	}
	for i := 0; i < len(text); {
		r, size := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(text[i:])
		}
		i += size
		switch {
		case r < utf8.RuneSelf && asciiWord[r] != 0:
			buf[n] = asciiWord[r]
			n++
		case r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			n += utf8.EncodeRune(buf[n:], unicode.ToLower(r))
		default:
			end()
			continue
		}
		if n >= wordBuf {
			w, n = h.hash(w, buf[:n]), 0
		}
	}
	end()
	c.finish()
}

// asciiWord is the lower-case of an ASCII letter or digit, 0 for any other
// ASCII byte.
var asciiWord = func() (t [utf8.RuneSelf]byte) {
	for c := range t {
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			t[c] = byte(c)
		case 'A' <= c && c <= 'Z':
			t[c] = byte(c + 'a' - 'A')
		}
	}
	return t
}()

// A collector keeps the simK smallest distinct values added: they go to a
// buffer of twice that; when it is full, it keeps the simK smallest and
// from then on skips every value not below the largest of them.
type collector struct {
	v     [2 * simK]uint32
	n     int
	cut   bool
	bound uint32 // if cut: values at or above it are not among the smallest
}

func (c *collector) add(x uint32) {
	if c.cut && x >= c.bound {
		return
	}
	c.v[c.n] = x
	c.n++
	if c.n == len(c.v) {
		c.keep()
	}
}

// keep sorts the values, drops the repeated ones and, past simK, the
// largest.
func (c *collector) keep() {
	slices.Sort(c.v[:c.n])
	c.n = len(slices.Compact(c.v[:c.n]))
	if c.n > simK {
		c.n, c.cut, c.bound = simK, true, c.v[simK-1]
	}
}

// finish leaves in v[:n] the simK smallest distinct values, ascending.
func (c *collector) finish() {
	if c.n <= smallSort {
		c.rankSort()
	} else {
		slices.Sort(c.v[:c.n])
	}
	c.n = len(slices.Compact(c.v[:c.n]))
	if c.n > simK {
		c.n, c.cut = simK, true
	}
}

// smallSort is the most values rankSort sorts: most texts have fewer
// pairs, and sorting them was a third of making a fingerprint, most of it
// insertion sort's mispredicted branches.
const smallSort = 32

// rankSort sorts v[:n], n <= smallSort, without a data-dependent branch:
// each value goes to its rank, the number of values below it plus the
// number of equal ones before it (so equal values take distinct places).
func (c *collector) rankSort() {
	n := c.n
	in, out := c.v[:n], c.v[simK:simK+n]
	for i, x := range in {
		r := uint64(0)
		for _, y := range in[:i] { // y <= x, as 64-bit values: y - x - 1 < 0
			r += (uint64(y) - uint64(x) - 1) >> 63
		}
		for _, y := range in[i+1:] { // y < x
			r += (uint64(y) - uint64(x)) >> 63
		}
		out[r] = x
	}
	copy(in, out)
}

// simScale is the unit of similarity as a Set compares it: millionths, so
// that the comparison is exact in integers.
const simScale = 1_000_000

// share returns how many of the pairs compared both texts have, and how
// many were compared: every pair of either text if neither fingerprint is
// cut, else the simK smallest of the union of their hashes.
func share(a, b fingerprint) (both, union int) {
	i, j := 0, 0
	// A cut fingerprint holds simK hashes: the union's simK smallest are
	// all in one or the other, and whether each is in both is known.
	limit := len(a.h) + len(b.h)
	if a.cut || b.cut {
		limit = simK
	}
	for union < limit && (i < len(a.h) || j < len(b.h)) {
		switch {
		case j == len(b.h) || i < len(a.h) && a.h[i] < b.h[j]:
			i++
		case i == len(a.h) || b.h[j] < a.h[i]:
			j++
		default:
			both++
			i++
			j++
		}
		union++
	}
	return both, union
}

// alike reports whether a and b are alike at similarity sim (millionths):
// a share of at least sim of the pairs compared. Two exact fingerprints of
// very different sizes cannot be, which is checked first.
func alike(a, b fingerprint, sim int64) bool {
	if !a.cut && !b.cut {
		small, big := int64(min(len(a.h), len(b.h))), int64(max(len(a.h), len(b.h)))
		if small*simScale < sim*big {
			return false
		}
		return alikeExact(a.h, b.h, sim)
	}
	both, union := share(a, b)
	return union > 0 && int64(both)*simScale >= sim*int64(union)
}

// alikeExact is alike for two exact fingerprints, whose union is every
// pair either has: len(a) + len(b) - both. They are alike when both·S >=
// sim·(len(a) + len(b) - both), S = simScale, that is when both reaches
// need = ⌈sim·(len(a) + len(b)) / (S + sim)⌉. The merge stops as soon as
// the answer is known: both has reached need, or cannot with the hashes
// left. Most candidates a room's index gives are decided early.
func alikeExact(a, b []uint32, sim int64) bool {
	if len(a)+len(b) == 0 {
		return false
	}
	per := simScale + sim
	need := int((sim*int64(len(a)+len(b)) + per - 1) / per)
	both, i, j := 0, 0, 0
	for both < need {
		if both+min(len(a)-i, len(b)-j) < need {
			return false
		}
		switch x, y := a[i], b[j]; {
		case x < y:
			i++
		case y < x:
			j++
		default:
			both++
			i++
			j++
		}
	}
	return true
}

// surely is the share (millionths) at and above which two texts must
// always be found alike, whatever the similarity (docs/contract.md
// section 15).
const surely = 950_000

// keys appends to out the keys a similar policy indexes f by, and looks
// f up by: two fingerprints that share one are compared. They are of two
// kinds, so that texts sharing `surely` (0.95) or more always share one:
//
//   - pair keys, of an exact fingerprint of two hashes or more: each two
//     of its p smallest hashes, p = n - ⌈0.95n⌉ + 2 (n < 20: one key;
//     n = 128: 28). Two sets sharing o elements have their o
//     smallest common ones among the first n - o + 1 of each, so two
//     sharing 0.95 of their union have their two smallest common ones
//     among both prefixes (the prefix filter of exact set-similarity
//     joins, for two common elements). A key of two hashes, where the
//     filter's usual key is one, keeps a pair that many texts have (a
//     common phrase) from making every one a candidate of every other.
//   - single keys, of a cut fingerprint and of an exact one of at least
//     95% of simK hashes (which may meet a cut one at 0.95): each of its
//     prefix(sim) smallest. A cut fingerprint's share is estimated (share);
//     whenever the estimate reaches sim, their prefixes meet.
//
// A text of one pair has one key, its hash. Identical fingerprints have
// the same keys. Keys are never compared with each other as numbers, so
// a pair key that equals a single key only adds a candidate.
func (f fingerprint) keys(sim int64, out []uint64) []uint64 {
	n := int64(len(f.h))
	if f.cut || n*100 >= simK*95 {
		for _, x := range f.h[:f.prefix(sim)] {
			out = append(out, 1<<63|uint64(x))
		}
	}
	if n == 1 && !f.cut {
		return append(out, 1<<63|uint64(f.h[0]))
	}
	if f.cut || n < 2 {
		return out
	}
	p := min(n, n-(surely*n+simScale-1)/simScale+2)
	for i := range p {
		for j := i + 1; j < p; j++ {
			out = append(out, uint64(f.h[i])<<32|uint64(f.h[j]))
		}
	}
	return out
}

// oneKey reports whether f has a single index key (keys): an exact
// fingerprint of fewer than 20 hashes, whose one pair key is its two
// smallest (or, of one hash, its single key).
func (f fingerprint) oneKey() bool {
	return !f.cut && len(f.h) < 20
}

// prefix is how many of the smallest hashes of f, cut or of at least 95%
// of simK hashes, its single keys are: enough that whenever the share of
// two reaches t (the lower of sim and `surely`), their prefixes meet
// (the prefix filter: if |A ∩ B| >= t|A ∪ B|, the |A| - ⌈t|A|⌉ + 1
// smallest of A and the |B| - ⌈t|B|⌉ + 1 smallest of B meet). For a cut
// one it holds of the sample the estimate is made of, a prefix of each.
func (f fingerprint) prefix(sim int64) int {
	n := int64(len(f.h))
	t := min(int64(surely), sim)
	return int(min(n, n-(t*n+simScale-1)/simScale+1))
}
