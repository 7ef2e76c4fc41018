package ingest

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// str is a scanned JSON string: data[start:end] is its raw content between
// the quotes.
type str struct {
	start, end int
	esc        bool // holds a backslash escape
	other      bool // holds a byte >= 0x7f (DEL or non-ASCII)
}

// plain marks the bytes a string may hold that need no second look:
// printable ASCII except '"' and '\\'. DEL needs none either, but goes
// with the bytes above it, as in special: that only costs a string that
// holds one a utf8.Valid in value.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	t['"'] = false
	t['\\'] = false
	return t
}()

// str scans the JSON string whose opening quote is data[i] and returns it
// with the index after its closing quote.
func (sc *scanner) str(i int) (s str, next int, err *Error) {
	data := sc.data
	if i >= len(data) || data[i] != '"' {
		return s, i, sc.unexpected(i, "looking for an object key")
	}
	i++
	s.start = i
	for {
		// Eight bytes at a time while none of them needs a look: this is
		// where a typical event spends most of its bytes.
		for i+8 <= len(data) {
			if special(binary.LittleEndian.Uint64(data[i:])) {
				break
			}
			i += 8
		}
		for i < len(data) && plain[data[i]] {
			i++
		}
		if i >= len(data) {
			return s, i, sc.syntax(i, "unexpected end of input in string")
		}
		switch c := data[i]; {
		case c == '"':
			s.end = i
			return s, i + 1, nil
		case c == '\\':
			s.esc = true
			if i+1 >= len(data) {
				return s, i, sc.syntax(i+1, "unexpected end of input in string escape")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for j := i + 2; j < i+6; j++ {
					if j >= len(data) {
						return s, j, sc.syntax(j, "unexpected end of input in \\u escape")
					}
					if unhex(data[j]) < 0 {
						return s, j, sc.unexpected(j, "in \\u escape")
					}
				}
				i += 6
			default:
				return s, i, sc.unexpected(i+1, "in string escape")
			}
		case c < 0x20:
			return s, i, sc.syntax(i, fmt.Sprintf("control character 0x%02x in string", c))
		default:
			s.other = true
			i++
		}
	}
}

// special reports whether any of the 8 bytes in w is '"', '\\', below 0x20
// or at least 0x7f.
func special(w uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	quote := w ^ (lo * '"')
	backslash := w ^ (lo * '\\')
	// For bytes below 0x80, x - lo*n sets a byte's high bit iff the byte is
	// below n (borrows only start at such bytes); &^ w drops bytes >= 0x80,
	// which the last term catches anyway. Adding 1 turns 0x7f (DEL) into 0x80.
	return ((w-lo*0x20)|(quote-lo)|(backslash-lo))&^w&hi != 0 || (w+lo)&hi|w&hi != 0
}

// value returns the Go string of s: an alias of the payload when s needs
// no change, otherwise a new string unescaped as encoding/json does, with
// U+FFFD for each invalid UTF-8 byte and unpaired surrogate escape. bad
// reports whether there was any.
func (sc *scanner) value(s str) (v string, bad bool) {
	raw := sc.data[s.start:s.end]
	if !s.esc && (!s.other || utf8.Valid(raw)) {
		return alias(raw), false
	}
	b, bad := appendUnescaped(make([]byte, 0, len(raw)), raw)
	return alias(b), bad
}

// alias returns b as a string without copying; b must never change again.
func alias(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// appendUnescaped appends the unescaped raw content of a JSON string, which
// str has already checked, to dst.
func appendUnescaped(dst, raw []byte) (_ []byte, bad bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c == '\\' {
			switch raw[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if pair := utf16.DecodeRune(r, hex4(raw[i+2:])); pair != utf8.RuneError {
							dst = utf8.AppendRune(dst, pair)
							i += 6
							continue
						}
					}
					r, bad = utf8.RuneError, true
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, raw[i+1])
			}
			i += 2
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, r)
			bad = true
		} else {
			dst = append(dst, raw[i:i+n]...)
		}
		i += n
	}
	return dst, bad
}

func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	return rune(unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3]))
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// String reads lit, one JSON string literal with its quotes, as an
// event's fields are read: its value, unescaped, invalid UTF-8 and
// unpaired surrogate escapes read as U+FFFD (as a text is), a copy of lit;
// and whether it says exactly what it unescapes to, as a room or user name
// must (no such byte or escape). ok is false when lit is not one string.
// It is how a request that names rooms and users (a throttle check, a
// websocket frame) reads them by the rules of the events they are checked
// against.
func String(lit []byte) (v string, exact, ok bool) {
	sc := scanner{data: lit}
	s, next, err := sc.str(0)
	if err != nil || next != len(lit) {
		return "", false, false
	}
	v, bad := sc.value(s)
	return strings.Clone(v), !bad, true
}
