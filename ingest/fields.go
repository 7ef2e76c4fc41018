package ingest

import (
	"fmt"

	"github.com/chatpulse/chatpulse/chat"
)

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
	scanner
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
