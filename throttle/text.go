package throttle

import (
	"hash/maphash"
	"unicode"
	"unicode/utf8"
)

// Seeds of the hashes of key names and of texts, random per process. Only
// equality of hashes is used, and nothing hashed outlives the process, so
// the answers never depend on the seed; being secret, it keeps anyone from
// making keys collide on purpose.
var (
	nameSeed = maphash.MakeSeed()
	textSeed = maphash.MakeSeed()
)

// nameHash is the hash of a user's or a room's name, or of "" (a group's
// key).
func nameHash(name string) uint64 { return maphash.String(nameSeed, name) }

// textHash returns a hash of text after normalization, and false if nothing
// is left of it: leading and trailing white space is trimmed, every run of
// Unicode white space becomes one space, and case is folded (each rune is
// replaced by the smallest rune of its unicode.SimpleFold orbit, so two texts
// normalize alike exactly when strings.EqualFold would say their runes
// match). An invalid UTF-8 byte counts as U+FFFD. The hash is maphash, with
// the process's textSeed, of the UTF-8 of the normalized text, which is
// written to a buffer on the stack (in pieces, for a long text) and not
// kept.
func textHash(text string) (uint64, bool) {
	var buf [normBuf]byte
	if len(text) > normPiece {
		return textHashLong(text, &buf)
	}
	n, afterSpace := normalize(&buf, 0, text, 1)
	n -= afterSpace & min(n, 1) // a trailing space
	return maphash.Bytes(textSeed, buf[:n]), n > 0
}

// A piece of normPiece bytes of text normalizes to at most 3 bytes a byte
// (an invalid byte becomes U+FFFD; folding never makes a rune longer),
// which a buffer of normBuf bytes holds with one space held back.
const (
	normPiece = 84
	normBuf   = 1 + 3*normPiece
)

// textHashLong is textHash for a text longer than normPiece: it normalizes
// and hashes it a piece at a time.
func textHashLong(text string, buf *[normBuf]byte) (uint64, bool) {
	var h maphash.Hash
	h.SetSeed(textSeed)
	n, afterSpace, wrote := 0, 1, false
	for len(text) > 0 {
		cut := pieceEnd(text)
		n, afterSpace = normalize(buf, n, text[:cut], afterSpace)
		text = text[cut:]
		// Hold a space back: it may turn out to be trailing.
		m := n - afterSpace&min(n, 1)
		h.Write(buf[:m])
		wrote = wrote || m > 0
		n = copy(buf[:], buf[m:n])
	}
	return h.Sum64(), wrote
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
