package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chatpulse/chatpulse/chat"
)

// refDecode is Decode written the plain way: encoding/json parses (json.Valid
// for the syntax, a json.Decoder walking the top-level object for the fields
// in order), and the contract's rules are applied to what it returns. What
// encoding/json does not see is checked explicitly: nesting depth,
// duplicate keys (it keeps the last), exact key case (it folds case),
// invalid UTF-8 and unpaired surrogates in room and user (it replaces them
// with U+FFFD), and RFC 3339 strictness (time.Parse also takes 1-digit
// hours, comma fractions and offset hour 24).
func refDecode(data []byte, now, maxSkewMs int64) (Event, *Error) {
	if len(data) > MaxPayload {
		return Event{}, &Error{ReasonTooLarge, fmt.Sprintf("payload is %d bytes, more than the limit of %d", len(data), MaxPayload)}
	}
	malformed := func(msg string) (Event, *Error) { return Event{}, &Error{ReasonMalformed, msg} }
	if !json.Valid(data) {
		return malformed("not valid JSON")
	}
	if k := refKind(bytes.TrimLeft(data, " \t\r\n")); k != "object" {
		return malformed("payload must be a JSON object, got " + k)
	}
	if refDepth(data) > MaxDepth {
		return malformed("too deep")
	}

	ev := Event{Counted: true}
	var ts int64
	hasTS := false
	var invalid *Error
	fail := func(msg string) {
		if invalid == nil {
			invalid = &Error{ReasonInvalid, msg}
		}
	}
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return malformed(err.Error())
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(err.Error())
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return malformed(err.Error())
		}
		raw = bytes.TrimSpace(raw)
		kind := refKind(raw)
		switch key {
		case "room", "user", "ts", "type", "text", "id", "mentions":
			if seen[key] {
				fail(key + ": duplicate key")
			}
			seen[key] = true
		}
		var s string
		if kind == "string" {
			if err := json.Unmarshal(raw, &s); err != nil {
				return malformed(err.Error())
			}
		}
		switch key {
		case "room", "user":
			switch kind {
			case "null":
				s = ""
			case "string":
				if msg := refNameProblem(key, raw, s); msg != "" {
					fail(msg)
					s = ""
				}
			default:
				return malformed(key + ": must be a string, got " + kind)
			}
			if key == "room" {
				ev.Room = s
			} else {
				ev.User = s
			}
		case "ts":
			switch kind {
			case "null":
				hasTS = false
			case "string":
				hasTS = true
				t, ok := refParseTime(s)
				if !ok {
					fail(fmt.Sprintf("ts: must be an RFC 3339 timestamp, got %q", refClip(s)))
				} else if ts = t.UnixMilli(); ts < 0 || ts > MaxTS {
					fail(fmt.Sprintf("ts: must be within years 1970..9999 UTC, got %q", refClip(s)))
				}
			case "number":
				hasTS = true
				lit := string(raw)
				if strings.ContainsAny(lit, ".eE") {
					fail("ts: must be integer Unix milliseconds, got " + refClip(lit))
				} else if ts, err = strconv.ParseInt(lit, 10, 64); err != nil || ts < 0 || ts > MaxTS {
					fail("ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got " + refClip(lit))
				}
			default:
				return malformed("ts: must be an RFC 3339 string or integer Unix milliseconds, got " + kind)
			}
		case "type":
			switch kind {
			case "null":
				ev.Kind, ev.Counted = chat.KindMessage, true
			case "string":
				ev.Kind, ev.Counted = map[string]chat.Kind{"join": chat.KindJoin, "leave": chat.KindLeave}[s],
					s == "message" || s == "join" || s == "leave"
			default:
				return malformed("type: must be a string, got " + kind)
			}
		case "text":
			ev.Text, ev.HasText = s, kind == "string"
		case "id":
			ev.ID = s
		case "mentions":
			ev.Mentions = nil
			var elems []json.RawMessage
			if kind == "array" {
				json.Unmarshal(raw, &elems)
			}
			for _, e := range elems {
				var name string
				if e = bytes.TrimSpace(e); refKind(e) == "string" && json.Unmarshal(e, &name) == nil {
					ev.Mentions = append(ev.Mentions, name)
				}
			}
		}
	}
	if invalid == nil && ev.Room == "" {
		fail("room: missing")
	}
	if invalid == nil && ev.User == "" {
		fail("user: missing")
	}
	if invalid != nil {
		return Event{}, invalid
	}
	if !hasTS {
		ev.TS = now
		return ev, nil
	}
	if ts-now > maxSkewMs {
		return Event{}, &Error{ReasonFuture, fmt.Sprintf("ts: %s is %s ahead of the clock, more than the allowed skew of %s",
			time.UnixMilli(ts).UTC().Format("2006-01-02T15:04:05.000Z07:00"), formatMs(ts-now), formatMs(maxSkewMs))}
	}
	ev.TS = ts
	return ev, nil
}

func refKind(raw []byte) string {
	switch raw[0] {
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
	}
	return "number"
}

// refDepth is the deepest nesting of objects and arrays in valid JSON.
func refDepth(data []byte) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// refNameProblem checks a room or user: raw is its JSON string, s what
// encoding/json made of it.
func refNameProblem(field string, raw []byte, s string) string {
	if !utf8.Valid(raw) || refUnpairedSurrogate(raw) {
		return field + ": must be valid UTF-8"
	}
	if len(s) < 1 || len(s) > 128 {
		return fmt.Sprintf("%s: must be 1..128 bytes, got %d", field, len(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("%s: must not contain control characters, got %U", field, r)
		}
	}
	return ""
}

// refUnpairedSurrogate reports whether a valid JSON string has a \u escape
// of a surrogate that is not a high one directly followed by a low one.
func refUnpairedSurrogate(raw []byte) bool {
	u := func(i int) rune { // the \u escape at raw[i:], or -1
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return -1
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			panic(err)
		}
		return rune(v)
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r := u(i)
		if r < 0 {
			i++ // a two-byte escape: skip what it escapes
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if low := u(i + 6); low >= 0xDC00 && low < 0xE000 {
				i += 11
				continue
			}
			return true
		case r >= 0xDC00 && r < 0xE000:
			return true
		}
		i += 5
	}
	return false
}

var rfc3339 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-](\d{2}):(\d{2}))$`)

func refParseTime(s string) (time.Time, bool) {
	m := rfc3339.FindStringSubmatch(s)
	if m == nil {
		return time.Time{}, false
	}
	if m[3] != "" && (m[3] > "23" || m[4] > "59") {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

func refClip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
