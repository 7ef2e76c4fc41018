package ingest

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/chatpulse/chatpulse/chat"
)

// Limits of an accepted event (contract section 1, plus the choices Decode
// documents).
const (
	// MaxPayload is the largest payload Decode parses; longer ones are
	// too_large without being looked at.
	MaxPayload = 64 << 10
	// MaxDepth is the deepest nesting of objects and arrays, counting the
	// top-level object as 1. Deeper payloads are malformed: the scanner keeps
	// its container stack in one machine word, and no chat event needs more.
	MaxDepth = 64
	// MinTS and MaxTS bound ts in Unix milliseconds: 1970-01-01T00:00:00.000Z
	// to 9999-12-31T23:59:59.999Z. Anything outside is invalid, whether it
	// came as a number or as a string.
	MinTS = 0
	MaxTS = 253402300799999
)

// Event is one decoded chat event.
//
// Room, User and Text alias the payload (no copy) when they hold no
// escapes, so the payload must not be modified while the Event is in use,
// and callers that keep one of them beyond that (a map key, say) must copy
// it, e.g. with strings.Clone.
type Event struct {
	Room, User string
	// TS is in Unix milliseconds: the event's ts, or now when ts is absent
	// or null.
	TS int64
	// Text is the text field when it is a JSON string, "" otherwise.
	// Invalid UTF-8 and unpaired surrogate escapes in it are replaced by
	// U+FFFD, as encoding/json does, so Text is always valid UTF-8.
	Text    string
	HasText bool
	// Counted is true when type is absent, null or "message". False: another
	// type (join, edit, ""...), accepted and ignored by the counters.
	Counted bool
}

// Reason is why an event was rejected. It is the reason label of
// chatpulse_events_rejected_total and the last token of the dead-letter
// subject chatpulse.deadletter.<reason>.
type Reason string

// The rejection reasons of contract section 1. When a payload has several
// problems, Decode reports the first of too_large, malformed, invalid,
// future; within one reason, the first problem in payload order, and a
// missing room or user after every other invalid field.
const (
	ReasonMalformed Reason = "malformed" // not one JSON object, or a wrong JSON type for room, user, ts or type
	ReasonInvalid   Reason = "invalid"   // missing or bad room or user, bad ts, duplicate field
	ReasonTooLarge  Reason = "too_large" // more than MaxPayload bytes
	ReasonLate      Reason = "late"      // older than every window: decided by the aggregator, never by Decode
	ReasonFuture    Reason = "future"    // ts more than the allowed skew ahead of now
)

// Reasons returns every rejection reason, so that each labelled metric
// series can be exported at 0 from the start.
func Reasons() []Reason {
	return []Reason{ReasonMalformed, ReasonInvalid, ReasonTooLarge, ReasonLate, ReasonFuture}
}

// Error is a rejected event. Msg is one human-readable line naming the
// field and the problem (`room: must be 1..128 bytes, got 0`), fit for the
// Chatpulse-Error header: values from the payload are quoted with Go
// escapes and clipped to 64 bytes, so it holds no control characters.
type Error struct {
	Reason Reason
	Msg    string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Msg }

// Decode decodes and validates one event payload in a single pass over
// data, without reflection. It allocates only when a string it extracts
// (room, user, ts, type, text) holds escapes or invalid UTF-8, and for the
// *Error of a rejected event. now is the wall clock in Unix milliseconds
// (used for an absent ts and for the future check) and maxSkewMs the
// allowed lead of ts over it (>= 0).
//
// Every non-nil error is an *Error; the Event is then the zero Event.
//
// Beyond contract section 1, Decode decides:
//   - Field names match exactly and case-sensitively after unescaping
//     ("r\u006fom" is room, "Room" is not), unlike encoding/json.
//   - room, user, ts, type or text twice: invalid, "room: duplicate key".
//   - null for any of the five fields means absent: room or user null is
//     "missing" (invalid); ts null takes now; type null counts; text null
//     has no text.
//   - room and user are checked after unescaping, in this order: valid
//     UTF-8 (an unpaired surrogate escape such as \ud800 is not), 1..128
//     bytes, no unicode.IsControl rune (C0, DEL, C1; escaped ones too).
//   - ts as a number must be an integer literal (no fraction, no exponent,
//     even 1e3 or 1.0: invalid) within MinTS..MaxTS; -0 is 0.
//   - ts as a string must be RFC 3339 as time.Parse's strict path reads it:
//     YYYY-MM-DDTHH:MM:SS, optional fraction of any length, then Z or
//     ±HH:MM; upper-case T and Z only, no leap second, real calendar days,
//     offset hours 00..23. Sub-millisecond digits are truncated, and the
//     instant must lie within MinTS..MaxTS.
//   - type "" or any other string than "message" (case-sensitive) is not
//     counted.
//   - Strings outside room and user may hold invalid UTF-8 (accepted, as by
//     encoding/json); every string must still be a valid JSON string.
//   - Nesting deeper than MaxDepth is malformed, even in ignored fields.
func Decode(data []byte, now, maxSkewMs int64) (Event, error) {
	if len(data) > MaxPayload {
		return Event{}, &Error{ReasonTooLarge, fmt.Sprintf("payload is %d bytes, more than the limit of %d", len(data), MaxPayload)}
	}
	d := decoder{data: data}
	ev, ts, hasTS, err := d.object()
	if err != nil {
		return Event{}, err
	}
	if d.invalid != nil {
		return Event{}, d.invalid
	}
	if !hasTS {
		ev.TS = now
		return ev, nil
	}
	if lead := ts - now; lead > maxSkewMs {
		return Event{}, &Error{ReasonFuture, fmt.Sprintf("ts: %s is %s ahead of the clock, more than the allowed skew of %s",
			chat.Time(ts), formatMs(lead), formatMs(maxSkewMs))}
	}
	ev.TS = ts
	return ev, nil
}

// The fields Decode extracts, as bits of a seen-set.
const (
	fieldRoom = 1 << iota
	fieldUser
	fieldTS
	fieldType
	fieldText
)

// decoder holds the scan of one payload. Syntax errors and wrong types
// (malformed) end the scan at once; an invalid field is remembered and the
// scan goes on, because a malformed payload must be reported as malformed
// wherever its fault lies.
type decoder struct {
	data    []byte
	i       int    // next byte to read
	invalid *Error // the first invalid field, if any
}

func (d *decoder) fail(msg string) {
	if d.invalid == nil {
		d.invalid = &Error{ReasonInvalid, msg}
	}
}

// object scans the whole payload, which must be one JSON object with
// nothing but whitespace around it.
func (d *decoder) object() (ev Event, ts int64, hasTS bool, err *Error) {
	data := d.data
	ev.Counted = true
	var seen uint8
	i := skipWS(data, 0)
	if i == len(data) {
		return ev, 0, false, &Error{ReasonMalformed, "no JSON value in payload"}
	}
	if data[i] != '{' {
		if k := kindOf(data[i]); k != "" {
			return ev, 0, false, &Error{ReasonMalformed, "payload must be a JSON object, got " + k}
		}
		return ev, 0, false, d.unexpected(i, "looking for a value")
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			key, next, err := d.str(i)
			if err != nil {
				return ev, 0, false, err
			}
			f := d.field(key)
			if i, err = d.colon(next); err != nil {
				return ev, 0, false, err
			}
			if f != 0 {
				if seen&f != 0 {
					d.fail(fieldName(f) + ": duplicate key")
				}
				seen |= f
			}
			d.i = i
			switch f {
			case fieldRoom:
				ev.Room, err = d.name("room")
			case fieldUser:
				ev.User, err = d.name("user")
			case fieldTS:
				ts, hasTS, err = d.ts()
			case fieldType:
				err = d.typ(&ev.Counted)
			case fieldText:
				ev.Text, ev.HasText, err = d.text()
			default:
				err = d.skip(1)
			}
			if err != nil {
				return ev, 0, false, err
			}
			i = skipWS(data, d.i)
			if i < len(data) && data[i] == ',' {
				i = skipWS(data, i+1)
				continue
			}
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			return ev, 0, false, d.unexpected(i, "after object field value")
		}
	}
	if i = skipWS(data, i); i != len(data) {
		return ev, 0, false, d.syntax(i, "data after the top-level object")
	}
	if d.invalid == nil {
		if ev.Room == "" {
			d.fail("room: missing")
		} else if ev.User == "" {
			d.fail("user: missing")
		}
	}
	return ev, ts, hasTS, nil
}

func fieldName(f uint8) string {
	switch f {
	case fieldRoom:
		return "room"
	case fieldUser:
		return "user"
	case fieldTS:
		return "ts"
	case fieldType:
		return "type"
	}
	return "text"
}

// field tells which of the extracted fields the key names, or 0.
func (d *decoder) field(key str) uint8 {
	raw := d.data[key.start:key.end]
	if key.esc {
		// An escape takes at most 6 bytes, so a longer key cannot unescape
		// to a 4-byte name.
		if len(raw) > 24 {
			return 0
		}
		var buf [32]byte
		raw, _ = appendUnescaped(buf[:0], raw)
	}
	switch string(raw) {
	case "room":
		return fieldRoom
	case "user":
		return fieldUser
	case "ts":
		return fieldTS
	case "type":
		return fieldType
	case "text":
		return fieldText
	}
	return 0
}

// name decodes room or user at d.i. A valid value is returned; an invalid
// one is recorded and "" returned, as for null.
func (d *decoder) name(field string) (string, *Error) {
	switch d.peek() {
	case '"':
	case 'n':
		return "", d.literal("null")
	default:
		return "", d.wrongType(field, "a string")
	}
	s, next, err := d.str(d.i)
	if err != nil {
		return "", err
	}
	d.i = next
	v, bad := d.value(s)
	if bad {
		d.fail(field + ": must be valid UTF-8")
		return "", nil
	}
	if err := chat.CheckName(field, v); err != nil {
		d.fail(err.Error())
		return "", nil
	}
	return v, nil
}

// ts decodes ts at d.i.
func (d *decoder) ts() (ms int64, present bool, err *Error) {
	switch c := d.peek(); {
	case c == '"':
		s, next, err := d.str(d.i)
		if err != nil {
			return 0, false, err
		}
		d.i = next
		v, _ := d.value(s)
		ms, ok := parseRFC3339(v)
		if !ok {
			d.fail(fmt.Sprintf("ts: must be an RFC 3339 timestamp, got %q", clip(v)))
		} else if ms < MinTS || ms > MaxTS {
			d.fail(fmt.Sprintf("ts: must be within years 1970..9999 UTC, got %q", clip(v)))
		}
		return ms, true, nil
	case c == '-' || c >= '0' && c <= '9':
		start := d.i
		integer, err := d.number()
		if err != nil {
			return 0, false, err
		}
		lit := d.data[start:d.i]
		if !integer {
			d.fail("ts: must be integer Unix milliseconds, got " + clip(string(lit)))
			return 0, true, nil
		}
		ms, ok := parseMs(lit)
		if !ok {
			d.fail("ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got " + clip(string(lit)))
		}
		return ms, true, nil
	case c == 'n':
		return 0, false, d.literal("null")
	}
	return 0, false, d.wrongType("ts", "an RFC 3339 string or integer Unix milliseconds")
}

// typ decodes type at d.i into counted.
func (d *decoder) typ(counted *bool) *Error {
	switch d.peek() {
	case '"':
	case 'n':
		*counted = true
		return d.literal("null")
	default:
		return d.wrongType("type", "a string")
	}
	s, next, err := d.str(d.i)
	if err != nil {
		return err
	}
	d.i = next
	v, _ := d.value(s)
	*counted = v == "message"
	return nil
}

// text decodes text at d.i: a string, or any other value, skipped.
func (d *decoder) text() (string, bool, *Error) {
	if d.peek() != '"' {
		return "", false, d.skip(1)
	}
	s, next, err := d.str(d.i)
	if err != nil {
		return "", false, err
	}
	d.i = next
	v, _ := d.value(s)
	return v, true, nil
}

func (d *decoder) peek() byte {
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

// wrongType reports the value at d.i as malformed: a JSON value of another
// type than field needs, or no JSON value at all.
func (d *decoder) wrongType(field, want string) *Error {
	if d.i < len(d.data) {
		if k := kindOf(d.data[d.i]); k != "" {
			return &Error{ReasonMalformed, field + ": must be " + want + ", got " + k}
		}
	}
	return d.unexpected(d.i, "looking for a value")
}

// kindOf names the JSON type of a value starting with c, or "" when no
// value starts with c.
func kindOf(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "number"
	}
	return ""
}

// str is a scanned JSON string: data[start:end] is its raw content between
// the quotes.
type str struct {
	start, end int
	esc        bool // holds a backslash escape
	other      bool // holds a byte >= 0x7f (DEL or non-ASCII)
}

// plain marks the bytes a string may hold that need no second look:
// printable ASCII except '"' and '\\'. DEL is left out so that room and
// user learn of it from the scan.
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
func (d *decoder) str(i int) (s str, next int, err *Error) {
	data := d.data
	if i >= len(data) || data[i] != '"' {
		return s, i, d.unexpected(i, "looking for an object key")
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
			return s, i, d.syntax(i, "unexpected end of input in string")
		}
		switch c := data[i]; {
		case c == '"':
			s.end = i
			return s, i + 1, nil
		case c == '\\':
			s.esc = true
			if i+1 >= len(data) {
				return s, i, d.syntax(i+1, "unexpected end of input in string escape")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for j := i + 2; j < i+6; j++ {
					if j >= len(data) {
						return s, j, d.syntax(j, "unexpected end of input in \\u escape")
					}
					if unhex(data[j]) < 0 {
						return s, j, d.unexpected(j, "in \\u escape")
					}
				}
				i += 6
			default:
				return s, i, d.unexpected(i+1, "in string escape")
			}
		case c < 0x20:
			return s, i, d.syntax(i, fmt.Sprintf("control character 0x%02x in string", c))
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

// colon expects optional whitespace, ':' and optional whitespace after an
// object key ending before i, and returns the index of the value.
func (d *decoder) colon(i int) (int, *Error) {
	i = skipWS(d.data, i)
	if i >= len(d.data) || d.data[i] != ':' {
		return i, d.unexpected(i, "after object key")
	}
	return skipWS(d.data, i+1), nil
}

// value returns the Go string of s: an alias of the payload when s needs
// no change, otherwise a new string unescaped as encoding/json does, with
// U+FFFD for each invalid UTF-8 byte and unpaired surrogate escape. bad
// reports whether there was any.
func (d *decoder) value(s str) (v string, bad bool) {
	raw := d.data[s.start:s.end]
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

// number scans a JSON number at d.i and reports whether it is written as an
// integer (no fraction, no exponent).
func (d *decoder) number() (integer bool, err *Error) {
	data, i := d.data, d.i
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	default:
		return false, d.unexpected(i, "in number")
	}
	integer = true
	if i < len(data) && data[i] == '.' {
		integer = false
		if i++; i >= len(data) || !isDigit(data[i]) {
			return false, d.unexpected(i, "after decimal point in number")
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		integer = false
		if i++; i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return false, d.unexpected(i, "in exponent of number")
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	d.i = i
	return integer, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// literal expects the literal lit (true, false or null) at d.i.
func (d *decoder) literal(lit string) *Error {
	for j := 0; j < len(lit); j++ {
		if d.i+j >= len(d.data) || d.data[d.i+j] != lit[j] {
			return d.unexpected(d.i+j, "in literal "+lit)
		}
	}
	d.i += len(lit)
	return nil
}

// skip checks and skips the JSON value at d.i, which lies inside depth
// containers. It keeps its own stack of open containers in a bit set (1:
// object), not the Go stack, so no payload can exhaust that.
func (d *decoder) skip(depth int) *Error {
	data := d.data
	var objects uint64
	open := 0
	i := d.i
	for {
		// A value starts at i.
		if i >= len(data) {
			return d.syntax(i, "unexpected end of input looking for a value")
		}
		switch c := data[i]; c {
		case '{', '[':
			if depth+open >= MaxDepth {
				return &Error{ReasonMalformed, fmt.Sprintf("nesting deeper than %d levels at byte %d", MaxDepth, i)}
			}
			i = skipWS(data, i+1)
			if i < len(data) && (c == '{' && data[i] == '}' || c == '[' && data[i] == ']') {
				i++
				break
			}
			if c == '[' {
				objects &^= 1 << open
				open++
				continue
			}
			objects |= 1 << open
			open++
			_, next, err := d.str(i)
			if err != nil {
				return err
			}
			if i, err = d.colon(next); err != nil {
				return err
			}
			continue
		case '"':
			_, next, err := d.str(i)
			if err != nil {
				return err
			}
			i = next
		case 't', 'f', 'n':
			lit := "null"
			if c == 't' {
				lit = "true"
			} else if c == 'f' {
				lit = "false"
			}
			d.i = i
			if err := d.literal(lit); err != nil {
				return err
			}
			i = d.i
		default:
			if c != '-' && !isDigit(c) {
				return d.unexpected(i, "looking for a value")
			}
			d.i = i
			if _, err := d.number(); err != nil {
				return err
			}
			i = d.i
		}
		// A value ended before i: close containers until one has a next
		// element, or the value at d.i is done.
		for {
			if open == 0 {
				d.i = i
				return nil
			}
			i = skipWS(data, i)
			inObject := objects&(1<<(open-1)) != 0
			if i < len(data) && data[i] == ',' {
				i = skipWS(data, i+1)
				if inObject {
					_, next, err := d.str(i)
					if err != nil {
						return err
					}
					if i, err = d.colon(next); err != nil {
						return err
					}
				}
				break
			}
			if i < len(data) && (inObject && data[i] == '}' || !inObject && data[i] == ']') {
				i++
				open--
				continue
			}
			if inObject {
				return d.unexpected(i, "after object field value")
			}
			return d.unexpected(i, "after array element")
		}
	}
}

func skipWS(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t') {
		i++
	}
	return i
}

func (d *decoder) syntax(i int, what string) *Error {
	return &Error{ReasonMalformed, fmt.Sprintf("syntax error at byte %d: %s", i, what)}
}

// unexpected reports the byte at i, or the end of input, as a syntax error.
func (d *decoder) unexpected(i int, where string) *Error {
	if i >= len(d.data) {
		return d.syntax(i, "unexpected end of input "+where)
	}
	c := d.data[i]
	if c >= 0x20 && c < 0x7f {
		return d.syntax(i, fmt.Sprintf("invalid character %q %s", c, where))
	}
	return d.syntax(i, fmt.Sprintf("invalid byte 0x%02x %s", c, where))
}

// clip shortens a value quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// parseMs parses a JSON integer literal as Unix milliseconds within
// MinTS..MaxTS.
func parseMs(lit []byte) (int64, bool) {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	// MaxTS has 15 digits, and JSON allows no leading zeros.
	if len(lit) > 15 {
		return 0, false
	}
	var ms int64
	for _, c := range lit {
		ms = ms*10 + int64(c-'0')
	}
	if neg && ms != 0 || ms > MaxTS {
		return 0, false
	}
	return ms, true
}

// parseRFC3339 parses s as time.Parse(time.RFC3339Nano, s) does on its
// strict path, straight to Unix milliseconds (sub-millisecond digits
// truncated), without a time.Time or a time zone.
func parseRFC3339(s string) (ms int64, ok bool) {
	if len(s) < len("2006-01-02T15:04:05Z") ||
		s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	s = s[19:]
	var frac int64
	if len(s) >= 2 && s[0] == '.' && isDigit(s[1]) {
		n := 1
		for ; n < len(s) && isDigit(s[n]); n++ {
			if n <= 3 {
				frac = frac*10 + int64(s[n]-'0')
			}
		}
		for k := n; k <= 3; k++ {
			frac *= 10
		}
		s = s[n:]
	}
	var offset int64
	switch {
	case s == "Z":
	case len(s) == len("+07:00") && (s[0] == '+' || s[0] == '-') && s[3] == ':':
		oh, ok1 := digits(s[1:3])
		om, ok2 := digits(s[4:6])
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return 0, false
		}
		offset = (oh*60 + om) * 60
		if s[0] == '-' {
			offset = -offset
		}
	default:
		return 0, false
	}
	secs := daysSinceEpoch(year, month, day)*86400 + hour*3600 + minute*60 + sec - offset
	return secs*1000 + frac, true
}

// digits parses a string of ASCII digits.
func digits(s string) (int64, bool) {
	var n int64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

func daysIn(month, year int64) int64 {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysSinceEpoch is the number of days from 1970-01-01 to the given date
// of the proleptic Gregorian calendar (Howard Hinnant's days_from_civil:
// years start in March, so the leap day ends a year).
func daysSinceEpoch(year, month, day int64) int64 {
	if month <= 2 {
		year--
	}
	era := year
	if era < 0 {
		era -= 399
	}
	era /= 400
	yoe := year - era*400                     // [0, 399]
	doy := (153*((month+9)%12)+2)/5 + day - 1 // [0, 365]
	doe := yoe*365 + yoe/4 - yoe/100 + doy    // [0, 146096]
	return era*146097 + doe - 719468
}

// formatMs writes milliseconds as a Go duration where one can hold them.
func formatMs(ms int64) string {
	const limit = int64(1<<63-1) / int64(time.Millisecond)
	if ms > limit || ms < -limit {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
