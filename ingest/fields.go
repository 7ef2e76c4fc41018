package ingest

import "github.com/chatpulse/chatpulse/chat"

// The fields the native front end extracts, as bits of a seen-set.
const (
	fieldRoom = 1 << iota
	fieldUser
	fieldTS
	fieldType
	fieldText
	fieldID
	fieldMentions
)

// decoder holds the scan of one payload. Syntax errors and wrong types
// (malformed) end the scan at once; an invalid field is remembered and the
// scan goes on, because a malformed payload must be reported as malformed
// wherever its fault lies.
type decoder struct {
	scanner
	invalid *Error // the first invalid field, if any
	maxName int    // the longest room or user, in bytes
}

func (d *decoder) fail(msg string) {
	if d.invalid == nil {
		d.invalid = &Error{ReasonInvalid, msg}
	}
}

// object is the native front end: it scans the whole payload, which must
// be one JSON object with nothing but whitespace around it, reading each
// field of docs/contract.md section 1 where it meets it.
func (d *decoder) object(ev *Event) (ts int64, hasTS bool, err *Error) {
	data := d.data
	ev.Counted = true
	var seen uint8
	i := skipWS(data, 0)
	if i == len(data) {
		return 0, false, &Error{ReasonMalformed, "no JSON value in payload"}
	}
	if data[i] != '{' {
		if k := kindOf(data[i]); k != "" {
			return 0, false, &Error{ReasonMalformed, "payload must be a JSON object, got " + k}
		}
		return 0, false, d.unexpected(i, "looking for a value")
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			key, next, err := d.str(i)
			if err != nil {
				return 0, false, err
			}
			f := d.field(key)
			if i, err = d.colon(next); err != nil {
				return 0, false, err
			}
			if f != 0 {
				if seen&f != 0 {
					d.fail(fieldName(f) + ": duplicate key")
				}
				seen |= f
			}
			d.i = i
			if f == 0 {
				err = d.skip(1)
			} else {
				var v val
				if d.i < len(data) && data[d.i] == '"' { // most values: no call of scanVal
					v.kind = '"'
					v.s, d.i, err = d.str(d.i)
				} else {
					v, err = d.scanVal(1)
				}
				if err == nil {
					// Inline, not a call per field: this is the hot path.
					var flt fault
					var msg string
					switch f {
					case fieldRoom:
						if v.present() { // null: missing, reported at the end
							ev.Room, flt, msg = d.name(v, "room", d.maxName, false)
						}
					case fieldUser:
						if v.present() {
							ev.User, flt, msg = d.name(v, "user", d.maxName, false)
						}
					case fieldTS:
						if hasTS = v.present(); hasTS {
							ts, flt, msg = d.ts(v, "ts", tsNative)
						}
					case fieldType:
						ev.Kind, ev.Counted, flt, msg = d.typ(v)
					case fieldText:
						ev.Text, ev.HasText = d.text(v)
					case fieldID:
						ev.ID, _ = d.text(v)
					case fieldMentions:
						ev.Mentions = d.mentions(v)
					}
					// A wrong JSON type for room, user, ts or type is
					// malformed; any other fault invalid (recorded, and the
					// field left as if absent).
					if flt == faultType {
						err = &Error{ReasonMalformed, msg}
					} else if flt != faultNone {
						d.fail(msg)
					}
				}
			}
			if err != nil {
				return 0, false, err
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
			return 0, false, d.unexpected(i, "after object field value")
		}
	}
	if i = skipWS(data, i); i != len(data) {
		return 0, false, d.syntax(i, "data after the top-level object")
	}
	if d.invalid == nil {
		if ev.Room == "" {
			d.fail("room: missing")
		} else if ev.User == "" {
			d.fail("user: missing")
		}
	}
	return ts, hasTS, nil
}

// typ reads a type of docs/contract.md sections 1 and 12: null is a message.
func (d *decoder) typ(v val) (chat.Kind, bool, fault, string) {
	switch v.kind {
	case 'n':
		return chat.KindMessage, true, faultNone, ""
	case '"':
		t, _ := d.text(v)
		k, counted := nativeKind(t)
		return k, counted, faultNone, ""
	}
	return chat.KindMessage, true, faultType, "type: must be a string, got " + kindName(v)
}

// nativeKind is what a type of docs/contract.md sections 1 and 12 says.
func nativeKind(t string) (chat.Kind, bool) {
	switch t {
	case "message":
		return chat.KindMessage, true
	case "join":
		return chat.KindJoin, true
	case "leave":
		return chat.KindLeave, true
	}
	return chat.KindMessage, false
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
	case fieldID:
		return "id"
	case fieldMentions:
		return "mentions"
	}
	return "text"
}

// field tells which of the extracted fields the key names, or 0.
func (d *decoder) field(key str) uint8 {
	raw := d.data[key.start:key.end]
	if key.esc {
		// An escape takes at most 6 bytes, so a longer key cannot unescape
		// to an 8-byte name.
		if len(raw) > 48 {
			return 0
		}
		var buf [48]byte
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
	case "id":
		return fieldID
	case "mentions":
		return fieldMentions
	}
	return 0
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
func parseMs(lit string) (int64, bool) {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	// MaxTS has 15 digits, and JSON allows no leading zeros.
	if len(lit) > 15 {
		return 0, false
	}
	var ms int64
	for i := 0; i < len(lit); i++ {
		ms = ms*10 + int64(lit[i]-'0')
	}
	if neg && ms != 0 || ms > MaxTS {
		return 0, false
	}
	return ms, true
}
