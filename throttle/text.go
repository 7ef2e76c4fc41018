package throttle

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// A hashKey is the secret key of a Set's hashes of names (nameHash) and of
// normalized texts (textHash): five random words, drawn when the Set is
// made.
//
// Why keyed: the hashes index tables whose keys anyone who can send a
// message chooses, and a repeat policy keeps only the hashes of its keys,
// so that two keys with equal hashes are one. With a secret key, nobody
// can make keys collide on purpose; by chance, a new key is taken for one
// of n tracked ones with a probability below n/2^64.
//
// Why not hash/maphash, which is keyed too: a maphash.Seed cannot be
// saved, so a Set restored from a saved state (LoadState) would hash every
// name and text differently from the Set that saved it, and never find
// its keys again. A hashKey is saved with the state, and a restored Set
// hashes exactly as the one that saved it.
//
// The hash is the one Go's runtime uses for its maps on machines without
// AES instructions (memhashFallback in runtime/hash64.go, after wyhash):
// a few 64x64->128-bit multiplications of input words xored with secret
// words, so it is fast on short names (faster than maphash.String here),
// and resists flooding as the runtime's maps do. It is not a
// cryptographic hash; the secret is what matters. Here each Set has its
// own key, where the runtime has one per process.
type hashKey struct {
	name, text uint64    // the seeds of nameHash and textHash
	k          [3]uint64 // secrets mixed with the input (hashkey[1:4] in the runtime)
}

// newHashKey returns a random key.
func newHashKey() *hashKey {
	var b [hashKeyLen]byte
	rand.Read(b[:]) // never fails (it crashes the program if it cannot read)
	return readHashKey(b[:])
}

// hashKeyLen is the length of a saved hashKey: five little-endian words.
const hashKeyLen = 5 * 8

func (h *hashKey) append(b []byte) []byte {
	for _, w := range [...]uint64{h.name, h.text, h.k[0], h.k[1], h.k[2]} {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

// readHashKey reads a key that append wrote; b must hold hashKeyLen bytes.
func readHashKey(b []byte) *hashKey {
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	return &hashKey{name: w(0), text: w(1), k: [3]uint64{w(2), w(3), w(4)}}
}

// idHash is the hash of a message's id: never 0, which stands for none.
func (h *hashKey) idHash(id string) uint64 {
	return h.hash(h.text^0x6964, unsafe.Slice(unsafe.StringData(id), len(id))) | 1
}

// nameHash is the hash of a user's or a room's name, or of "" (a group's
// key).
func (h *hashKey) nameHash(name string) uint64 {
	return h.hash(h.name, unsafe.Slice(unsafe.StringData(name), len(name))) // hash only reads
}

// hash is the hash of b from seed, as memhashFallback computes it (with
// seed^hashkey[0] there as seed here).
func (h *hashKey) hash(seed uint64, b []byte) uint64 {
	var a, c uint64
	switch n := len(b); {
	case n == 0:
		return seed
	case n < 4:
		a = uint64(b[0]) | uint64(b[n>>1])<<8 | uint64(b[n-1])<<16
	case n == 4:
		a = r4(b, 0)
		c = a
	case n < 8:
		a, c = r4(b, 0), r4(b, n-4)
	case n == 8:
		a = r8(b, 0)
		c = a
	case n <= 16:
		a, c = r8(b, 0), r8(b, n-8)
	default:
		p := 0
		if n > 48 {
			l := [3]uint64{seed, seed, seed}
			for ; n-p > 48; p += 48 {
				h.block(&l, b[p:p+48])
			}
			seed = l[0] ^ l[1] ^ l[2]
		}
		return h.tail(seed, b, p, n)
	}
	return mix(m5^uint64(len(b)), mix(a^h.k[0], c^seed))
}

const m5 = 0x1d8e4e27c47d124f

// block hashes one 48-byte block of a long input into the three lanes.
func (h *hashKey) block(l *[3]uint64, p []byte) {
	l[0] = mix(r8(p, 0)^h.k[0], r8(p, 8)^l[0])
	l[1] = mix(r8(p, 16)^h.k[1], r8(p, 24)^l[1])
	l[2] = mix(r8(p, 32)^h.k[2], r8(p, 40)^l[2])
}

// tail finishes the hash of an input of n > 16 bytes whose bytes from
// b[p:] on, 1 to 48 of them, are not hashed yet: the last 16 bytes are
// read even if some of them were hashed already, so b[:p] holds at least
// 16 bytes when p > 0.
func (h *hashKey) tail(seed uint64, b []byte, p, n int) uint64 {
	for ; len(b)-p > 16; p += 16 {
		seed = mix(r8(b, p)^h.k[0], r8(b, p+8)^seed)
	}
	return mix(m5^uint64(n), mix(r8(b, len(b)-16)^h.k[0], r8(b, len(b)-8)^seed))
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func r4(b []byte, i int) uint64 { return uint64(binary.LittleEndian.Uint32(b[i:])) }
func r8(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// A stream hashes bytes written in pieces exactly as hash would hash them
// written at once, however they are cut: it hashes 48-byte blocks as
// hash does, and only once it knows that more bytes follow, since hash
// treats the last 1 to 48 bytes apart.
type stream struct {
	h     *hashKey
	lanes [3]uint64
	n     int // bytes written
	// buf[:16] keeps the end of the last block hashed, which the tail
	// may read again; buf[16:16+m] are the bytes written since.
	buf [16 + 48]byte
	m   int
}

func (s *stream) reset(h *hashKey, seed uint64) {
	s.h, s.lanes, s.n, s.m = h, [3]uint64{seed, seed, seed}, 0, 0
}

func (s *stream) write(p []byte) {
	for {
		c := copy(s.buf[16+s.m:], p)
		s.m, s.n, p = s.m+c, s.n+c, p[c:]
		if len(p) == 0 {
			return
		}
		// 48 bytes wait, and more follow: they are a block.
		s.h.block(&s.lanes, s.buf[16:])
		copy(s.buf[:16], s.buf[48:])
		s.m = 0
	}
}

func (s *stream) sum() uint64 {
	if s.n <= 48 {
		return s.h.hash(s.lanes[0], s.buf[16:16+s.m])
	}
	return s.h.tail(s.lanes[0]^s.lanes[1]^s.lanes[2], s.buf[:16+s.m], 16, s.n)
}

// textHash returns a hash of text after normalization, and false if nothing
// is left of it: leading and trailing white space is trimmed, every run of
// Unicode white space becomes one space, and case is folded (each rune is
// replaced by the smallest rune of its unicode.SimpleFold orbit, so two texts
// normalize alike exactly when strings.EqualFold would say their runes
// match). An invalid UTF-8 byte counts as U+FFFD. The hash is hash, from
// the key's text seed, of the UTF-8 of the normalized text, which is
// written to a buffer on the stack (in pieces, for a long text, hashed as
// a stream) and not kept.
func (h *hashKey) textHash(text string) (uint64, bool) {
	var buf [normBuf]byte
	if len(text) > normPiece {
		return h.textHashLong(text, &buf)
	}
	n, afterSpace := normalize(&buf, 0, text, 1)
	n -= afterSpace & min(n, 1) // a trailing space
	return h.hash(h.text, buf[:n]), n > 0
}

// A piece of normPiece bytes of text normalizes to at most 3 bytes a byte
// (an invalid byte becomes U+FFFD; folding never makes a rune longer),
// which a buffer of normBuf bytes holds with one space held back.
const (
	normPiece = 84
	normBuf   = 1 + 3*normPiece
)

// textHashLong is textHash for a text longer than normPiece: it normalizes
// it a piece at a time, and hashes the pieces as a stream, so that the
// hash depends only on the normalized text, not on where it was cut.
func (h *hashKey) textHashLong(text string, buf *[normBuf]byte) (uint64, bool) {
	var s stream
	s.reset(h, h.text)
	n, afterSpace := 0, 1
	for len(text) > 0 {
		cut := pieceEnd(text)
		n, afterSpace = normalize(buf, n, text[:cut], afterSpace)
		text = text[cut:]
		// Hold a space back: it may turn out to be trailing.
		m := n - afterSpace&min(n, 1)
		s.write(buf[:m])
		n = copy(buf[:], buf[m:n])
	}
	return s.sum(), s.n > 0
}

// pieceEnd is where textHashLong cuts the first piece of text: after
// normPiece bytes, or before the valid rune that spans that cut, so that
// the pieces decode as the whole text does. (An invalid byte decodes as
// one U+FFFD wherever the cut is; a valid rune must not be cut. Backing up
// only to a byte that may start a rune is not enough: after a 4-byte rune,
// a stray continuation byte would make it back up into that rune.)
func pieceEnd(text string) int {
	cut := min(len(text), normPiece)
	if cut == len(text) {
		return cut
	}
	// The rune that spans the cut, if any, starts at the first byte
	// before it that may start one: a byte that can only continue a rune
	// is never the start of a valid one.
	for s := cut - 1; s >= cut-(utf8.UTFMax-1); s-- {
		if utf8.RuneStart(text[s]) {
			if r, size := utf8.DecodeRuneInString(text[s:]); (r != utf8.RuneError || size > 1) && s+size > cut {
				return s
			}
			break
		}
	}
	return cut
}

// normalize writes the normalization of text to buf[n:], which has room
// for 3 bytes a byte of text, and returns the new n. afterSpace is 1 when
// the last byte written is a space, or when nothing has been written yet
// (so that leading white space writes nothing); a trailing space is left
// for the caller to drop.
func normalize(buf *[normBuf]byte, n int, text string, afterSpace int) (int, int) {
	for i := 0; i < len(text); {
		if c := text[i]; c < utf8.RuneSelf {
			// The common case, without a branch on the text (words and
			// spaces come in no pattern a branch predictor could learn):
			// every byte is written, and a space right after a space is
			// then written over.
			i++
			c = asciiNorm[c]
			space := 0
			if c == ' ' {
				space = 1
			}
			buf[n] = c
			n += 1 - space&afterSpace
			afterSpace = space
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if unicode.IsSpace(r) {
			if afterSpace == 0 {
				buf[n] = ' '
				n++
				afterSpace = 1
			}
			continue
		}
		n += utf8.EncodeRune(buf[n:], fold(r))
		afterSpace = 0
	}
	return n, afterSpace
}

// asciiNorm is the normalization of an ASCII byte: ' ' for white space,
// upper case for a lower-case letter (the smallest rune of its fold orbit),
// the byte itself otherwise.
var asciiNorm = func() (t [utf8.RuneSelf]byte) {
	for c := range t {
		t[c] = byte(fold(rune(c)))
		if c == ' ' || '\t' <= c && c <= '\r' {
			t[c] = ' '
		}
	}
	return t
}()

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
