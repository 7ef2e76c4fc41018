package web

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// CheckRequest answers a throttle check request (contract section 5) that
// came some other way than HTTP, such as NATS request-reply: the answer, or
// an error; the error of a bad request has a method BadRequest.
func (s *Server) CheckRequest(body []byte) (any, error) {
	req, err := decodeCheck(body)
	if err != nil {
		return nil, err
	}
	return s.check(req), nil
}

// BadRequest marks the error as the requester's fault.
func (*badRequest) BadRequest() {}

// checkRequest is the body of a throttle check (contract section 5).
type checkRequest struct {
	Room string
	User string
	Text *string // nil: no text
}

const checkShape = `request must be a JSON object {"room": string, "user": string, "text": string (optional)}`

// decodeCheck parses and validates a check request, over HTTP or NATS, by
// the rules of an event's payload (ingest.Decode), so that a check names a
// room and a user exactly as the events it is checked against do:
//   - field names match exactly and case-sensitively after unescaping
//     (encoding/json alone would take "ROOM" for room), and each comes at
//     most once;
//   - room and user are checked after unescaping by chat.CheckName, and an
//     invalid byte or an unpaired surrogate escape such as "\ud800" is
//     refused (encoding/json alone would turn it into U+FFFD, another
//     room);
//   - null means absent;
//   - text, as an event's, may hold invalid UTF-8 or unpaired surrogates,
//     read as U+FFFD (as the events that the repeat policies counted were).
//
// Unlike an event, a check has no other fields: an unknown one is refused,
// to catch a misspelt "text".
func decodeCheck(data []byte) (checkRequest, error) {
	var req checkRequest
	if len(data) > maxCheckBody {
		return req, badf("request body over %d bytes", maxCheckBody)
	}
	// One valid JSON value and nothing else: the walk below can then only
	// meet the wrong shapes, not broken syntax.
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(json.RawMessage)) // for its message
		return req, badf("%s: %v", checkShape, err)
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return req, badf(checkShape)
	}
	var values [len(checkFields)]*string // nil: absent or null
	var seen [len(checkFields)]bool
	for i = skipSpace(data, i+1); data[i] != '}'; {
		key, next := literal(data, i)
		name := unquote(key)
		f := slices.Index(checkFields[:], name)
		if f < 0 {
			return req, badf("unknown field %q; a check has room, user and text", name)
		}
		if seen[f] {
			return req, badf("%s: duplicate key", name)
		}
		seen[f] = true
		i = skipSpace(data, skipSpace(data, next)+1) // past the colon
		switch data[i] {
		case 'n': // null
			i += len("null")
		case '"':
			lit, next := literal(data, i)
			if name != "text" && !exactString(lit) {
				return req, badf("%s: must be valid UTF-8", name)
			}
			v := unquote(lit)
			values[f], i = &v, next
		default:
			return req, badf("%s: must be a string", name)
		}
		if i = skipSpace(data, i); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	for f, name := range checkFields[:2] {
		if values[f] == nil {
			return req, badf("%s: missing", name)
		}
		if err := checkName(name, *values[f]); err != nil {
			return req, err
		}
	}
	return checkRequest{Room: *values[0], User: *values[1], Text: values[2]}, nil
}

// checkFields are the fields of a check request, room and user first.
var checkFields = [...]string{"room", "user", "text"}

// The walk over a check body, which json.Valid has checked: so a string
// ends, an object closes, and a value that starts with n is null.

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// literal is the JSON string literal that starts at data[i], quotes
// included, and the index after it.
func literal(data []byte, i int) (lit []byte, next int) {
	j := i + 1
	for data[j] != '"' {
		if data[j] == '\\' {
			j++ // the escaped character cannot end the string
		}
		j++
	}
	return data[i : j+1], j + 1
}

// unquote is the string a literal stands for, as encoding/json reads it:
// invalid UTF-8 and unpaired surrogate escapes become U+FFFD.
func unquote(lit []byte) string {
	if bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1])
	}
	var s string
	json.Unmarshal(lit, &s)
	return s
}

// exactString reports whether a valid JSON string literal unescapes to
// what it says: its bytes are UTF-8 and every \u escape of a surrogate is
// half of a pair.
func exactString(lit []byte) bool {
	if !utf8.Valid(lit) {
		return false
	}
	for i := 1; i < len(lit)-1; i++ {
		if lit[i] != '\\' {
			continue
		}
		i++ // the escaped character; a valid literal has one
		if lit[i] != 'u' {
			continue
		}
		r := hex4(lit[i+1:])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		// A high surrogate followed by the escape of a low one is a pair.
		if r >= 0xDC00 || i+6 >= len(lit) || lit[i+1] != '\\' || lit[i+2] != 'u' {
			return false
		}
		if lo := hex4(lit[i+3:]); lo < 0xDC00 || lo > 0xDFFF {
			return false
		}
		i += 6
	}
	return true
}

// hex4 reads the four hex digits that follow \u in a valid JSON string.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
