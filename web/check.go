package web

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/moderation"
	"github.com/chatpulse/chatpulse/throttle"
)

// CheckRequest answers a throttle check request (docs/contract.md sections 5
// and 10) that came some other way than HTTP, such as NATS request-reply:
// the answer, or an error; the error of a bad request has a method
// BadRequest. A JSON array of requests is answered by an array of answers,
// in order.
func (s *Server) CheckRequest(body []byte) (any, error) {
	if len(body) > maxCheckBody {
		return nil, badf("request body over %d bytes", maxCheckBody)
	}
	if i := skipSpace(body, 0); i == len(body) || body[i] != '[' {
		req, err := decodeCheck(body, s.opts.MaxName)
		if err != nil {
			return nil, err
		}
		return s.check(req), nil
	}
	reqs, err := decodeBatch(body, s.opts.MaxName)
	if err != nil {
		return nil, err
	}
	out := make([]throttle.Result, len(reqs))
	for i, req := range reqs {
		out[i] = s.check(req)
	}
	return out, nil
}

// maxBatch is the most checks one request may carry.
const maxBatch = 1000

// maxIDLen is the longest id of a consuming check, in bytes.
const maxIDLen = 128

// decodeBatch parses a JSON array of check requests, each validated; one
// bad request refuses them all, naming its index.
func decodeBatch(data []byte, maxName int) (reqs []checkRequest, err error) {
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return nil, badf("a batch must be a JSON array of check requests: %v", err)
	}
	if len(items) == 0 || len(items) > maxBatch {
		return nil, badf("a batch holds 1 to %d check requests, got %d", maxBatch, len(items))
	}
	reqs = make([]checkRequest, len(items))
	for i, item := range items {
		if reqs[i], err = decodeCheck(item, maxName); err != nil {
			return nil, badf("[%d]: %v", i, err)
		}
	}
	return reqs, nil
}

// BadRequest marks the error as the requester's fault.
func (*badRequest) BadRequest() {}

// checkRequest is the body of a throttle check (docs/contract.md sections
// 5 and 10).
type checkRequest struct {
	Room    string
	User    string
	Text    *string  // nil: no text
	Consume bool     // decide and count in one step
	ID      string   // the message's id: with Consume
	Roles   []string // what the chat server says the sender is
	// Mentions are whom the message mentions: with its text, what it
	// costs (docs/contract.md section 15).
	Mentions []string
}

const checkShape = `request must be a JSON object {"room": string, "user": string, "text": string (optional), "consume": boolean (optional), "id": string (with consume), "roles": [string] (optional), "mentions": [string] (optional)}, or an array of them`

var checkFields = map[string]kind{"room": name, "user": name, "text": text, "consume": boolean, "id": text, "roles": list, "mentions": list}

// maxRoles is the most roles a check may carry.
const maxRoles = 16

// decodeCheck parses and validates a check request, over HTTP or NATS, by
// the rules of an event's payload (ingest.Decode), so that a check names a
// room and a user exactly as the events it is checked against do (see
// decodeObject), and text is read as an event's text is: it may hold
// invalid UTF-8 or unpaired surrogates, read as U+FFFD (as the events
// that the repeat policies counted were).
func decodeCheck(data []byte, maxName int) (checkRequest, error) {
	if len(data) > maxCheckBody {
		return checkRequest{}, badf("request body over %d bytes", maxCheckBody)
	}
	f, err := decodeObject(data, checkShape, checkFields)
	if err != nil {
		return checkRequest{}, err
	}
	for _, field := range []string{"room", "user"} {
		v, ok := f[field]
		if !ok {
			return checkRequest{}, badf("%s: missing", field)
		}
		if err := checkName(field, v, maxName); err != nil {
			return checkRequest{}, err
		}
	}
	req := checkRequest{Room: f["room"], User: f["user"], Consume: f["consume"] == "true", ID: f["id"]}
	if t, ok := f["text"]; ok {
		req.Text = &t
	}
	if raw, ok := f["roles"]; ok {
		if err := json.Unmarshal([]byte(raw), &req.Roles); err != nil {
			return checkRequest{}, badf("roles: must be a list of strings")
		}
		if len(req.Roles) > maxRoles {
			return checkRequest{}, badf("roles: at most %d, got %d", maxRoles, len(req.Roles))
		}
		for i, r := range req.Roles {
			if err := moderation.CheckRole(r); err != nil {
				return checkRequest{}, badf("roles[%d]: %v", i, err)
			}
		}
	}
	if raw, ok := f["mentions"]; ok && json.Unmarshal([]byte(raw), &req.Mentions) != nil {
		return checkRequest{}, badf("mentions: must be a list of strings, the users the message mentions")
	}
	_, hasID := f["id"]
	switch {
	case req.Consume && !hasID:
		return checkRequest{}, badf("id: missing: a consuming check needs the id its message's event will carry")
	case hasID && (len(req.ID) == 0 || len(req.ID) > maxIDLen):
		return checkRequest{}, badf("id: must be 1..%d bytes, got %d", maxIDLen, len(req.ID))
	}
	return req, nil
}

// kind is what a field of a request may hold.
type kind int

const (
	name    kind = iota // a string that must say exactly what it unescapes to
	text                // a string, read as an event's text is
	integer             // an integer
	boolean             // true or false
	list                // a JSON array, kept as its text
)

// fields are the fields of a JSON request, as text, by name: absent ones
// (and null ones) are not there. They are params too.
type fields map[string]string

func (f fields) Get(name string) string { return f[name] }

// decodeObject reads a request that is one JSON object of the given fields,
// by the rules of an event's payload (ingest.Decode):
//   - field names match exactly and case-sensitively after unescaping
//     (encoding/json alone would take "ROOM" for room), and each comes at
//     most once; an unknown one is refused (to catch a misspelt field);
//   - a name is refused if its literal holds an invalid byte or an
//     unpaired surrogate escape such as "\ud800" (encoding/json alone would
//     turn it into U+FFFD: another room);
//   - an integer is a JSON number without fraction or exponent;
//   - null means absent.
func decodeObject(data []byte, shape string, want map[string]kind) (fields, error) {
	return decodeFields(data, shape, want, false)
}

// decodeFields is decodeObject, skipping the fields it does not know if
// loose (a body another program writes, which may grow new fields).
func decodeFields(data []byte, shape string, want map[string]kind, loose bool) (fields, error) {
	// One valid JSON value and nothing else: the walk below can then only
	// meet the wrong shapes, not broken syntax.
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(json.RawMessage)) // for its message
		return nil, badf("%s: %v", shape, err)
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, badf("%s", shape)
	}
	f := make(fields, len(want))
	var met [8]string
	seen := met[:0] // the fields met, which are few
	for i = skipSpace(data, i+1); data[i] != '}'; {
		key, next := literal(data, i)
		field := unquote(key)
		k, ok := want[field]
		if !ok && loose {
			i = skipSpace(data, skipSpace(data, next)+1) // past the colon
			if i = skipSpace(data, skipValue(data, i)); data[i] == ',' {
				i = skipSpace(data, i+1)
			}
			continue
		}
		if !ok {
			return nil, badf("unknown field %q; %s", field, shape)
		}
		if slices.Contains(seen, field) {
			return nil, badf("%s: duplicate key", field)
		}
		seen = append(seen, field)
		i = skipSpace(data, skipSpace(data, next)+1) // past the colon
		switch c := data[i]; {
		case c == 'n': // null
			i += len("null")
		case k == boolean && (c == 't' || c == 'f'):
			f[field] = "true"
			if c == 'f' {
				f[field] = "false"
			}
			i += len(f[field])
		case k == boolean:
			return nil, badf("%s: must be true or false", field)
		case k == list && c == '[':
			j := skipValue(data, i)
			f[field], i = string(data[i:j]), j
		case k == list:
			return nil, badf("%s: must be a list", field)
		case c == '"' && k != integer:
			lit, next := literal(data, i)
			if k == name && !exactString(lit) {
				return nil, badf("%s: must be valid UTF-8", field)
			}
			f[field], i = unquote(lit), next
		case k == integer && (c == '-' || '0' <= c && c <= '9'):
			j := i + 1
			for j < len(data) && '0' <= data[j] && data[j] <= '9' {
				j++
			}
			if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
				return nil, badf("%s: must be an integer", field)
			}
			f[field], i = string(data[i:j]), j
		case k == integer:
			return nil, badf("%s: must be an integer", field)
		default:
			return nil, badf("%s: must be a string", field)
		}
		if i = skipSpace(data, i); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return f, nil
}

// The walk over a request, which json.Valid has checked: so a string ends,
// an object closes, a number is well formed, and a value that starts with
// n is null.

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipValue is the index after the JSON value that starts at data[i].
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		_, next := literal(data, i)
		return next
	case '{', '[':
		for depth := 0; ; i++ { // json.Valid checked it: the brackets balance
			switch data[i] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			case '"':
				_, next := literal(data, i)
				i = next - 1
			}
			if depth == 0 {
				return i + 1
			}
		}
	}
	for i < len(data) && !strings.ContainsRune(",}] \t\r\n", rune(data[i])) { // a number, true, false or null
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

// unquote is the string a literal stands for, as an event's text is read
// (ingest.String): invalid UTF-8 and unpaired surrogate escapes become
// U+FFFD.
func unquote(lit []byte) string {
	v, _, _ := ingest.String(lit)
	return v
}

// exactString reports whether a valid JSON string literal unescapes to
// what it says, as an event's room and user must (ingest.String).
func exactString(lit []byte) bool {
	_, exact, _ := ingest.String(lit)
	return exact
}
