package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chatpulse/chatpulse/chat"
)

// refMapped is a mapping's decode written the plain way: encoding/json
// parses the payload into a tree that keeps every member (duplicates too,
// with where they lie), each pointer is resolved by walking the tree, and
// the rules of docs/contract.md section 13 and ParseMapping are applied to what
// it finds. Matrix's rules are written again here from the contract, not
// taken from matrixKind.
func refMapped(m mapping, data []byte, maxPayload, maxName int, now, maxSkewMs int64) (Event, *Error) {
	if len(data) > maxPayload {
		return Event{}, &Error{ReasonTooLarge, fmt.Sprintf("payload is %d bytes, more than the limit of %d", len(data), maxPayload)}
	}
	malformed := func(msg string) (Event, *Error) { return Event{}, &Error{ReasonMalformed, msg} }
	if !json.Valid(data) {
		return malformed("not valid JSON")
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if k := refKind(trimmed); k != "object" {
		return malformed("payload must be a JSON object, got " + k)
	}
	if refDepth(data) > MaxDepth {
		return malformed("too deep")
	}
	root := refTree(trimmed, len(data)-len(trimmed))

	// Resolve every pointer, noting every place each prefix of a pointer
	// is found at: a place found twice is a key given twice on the way.
	visits := map[string]map[int]bool{}
	vals := map[string]*refNode{}
	var resolve func(n *refNode, tokens []string, ptr string)
	resolve = func(n *refNode, tokens []string, ptr string) {
		if len(tokens) == 0 {
			vals[ptr] = n // the last of duplicates, as a scan keeps
			return
		}
		tok := tokens[0]
		next := ptr + "/" + escapeToken(tok)
		switch n.kind {
		case "object":
			for _, mb := range n.members {
				if mb.key == tok {
					visit(visits, next, mb.at)
					resolve(mb.val, tokens[1:], next)
				}
			}
		case "array":
			if i, err := strconv.Atoi(tok); err == nil && strconv.Itoa(i) == tok && i >= 0 && i < len(n.elems) {
				visit(visits, next, n.elems[i].at)
				resolve(n.elems[i], tokens[1:], next)
			}
		}
	}
	for _, ptrs := range m.ptrs {
		for _, ptr := range ptrs {
			tokens, err := parsePointer(ptr)
			if err != nil {
				panic(err)
			}
			canonical := ""
			for _, t := range tokens {
				canonical += "/" + escapeToken(t)
			}
			if _, done := vals[canonical]; !done {
				resolve(root, tokens, "")
			}
		}
	}
	// The first place found a second time, in payload order.
	dup, dupAt := "", -1
	for ptr, set := range visits {
		at := slices.Sorted(maps.Keys(set))
		if len(at) > 1 && (dupAt < 0 || at[1] < dupAt) {
			dup, dupAt = ptr, at[1]
		}
	}
	if dup != "" {
		return Event{}, &Error{ReasonInvalid, dup + ": duplicate key"}
	}

	// value returns the first present value of field, with its pointer.
	value := func(field int) (*refNode, string) {
		for _, ptr := range m.ptrs[field] {
			tokens, _ := parsePointer(ptr)
			canonical := ""
			for _, t := range tokens {
				canonical += "/" + escapeToken(t)
			}
			if v := vals[canonical]; v != nil && v.kind != "null" {
				return v, ptr
			}
		}
		return nil, ""
	}
	str := func(field int) (string, bool) {
		v, _ := value(field)
		if v == nil || v.kind != "string" {
			return "", false
		}
		return v.s, true
	}
	is := func(field int, want string) bool {
		s, ok := str(field)
		return ok && s == want
	}
	unmapped := func(msg string) (Event, *Error) { return Event{}, &Error{ReasonUnmapped, msg} }
	missing := func(field int) string {
		return mFieldNames[field] + ": no value at " + strings.Join(m.ptrs[field], " or ")
	}

	kind, counted, userField := chat.KindMessage, true, mUser
	switch {
	case m.rules == matrixRules: // Matrix, from docs/contract.md section 13 (Synapse's checks: no envelope)
		counted = false
		if len(m.ptrs[mEnvelope]) == 0 || is(mEnvelope, "new_room_event") {
			stateKey, _ := value(mStateKey)
			hasStateKey := stateKey != nil
			switch {
			case is(mType, "m.room.message") && !hasStateKey && !is(mRelType, "m.replace"):
				counted = true
			case is(mType, "m.room.member") && is(mMembership, "join"):
				kind, counted, userField = chat.KindJoin, true, mStateKey
			case is(mType, "m.room.member") && is(mMembership, "leave"):
				kind, counted, userField = chat.KindLeave, true, mStateKey
			}
		}
	case len(m.ptrs[mType]) > 0:
		v, ptr := value(mType)
		switch {
		case v == nil:
			counted = m.absent != nil
			if counted {
				kind = *m.absent
			}
		case v.kind == "string" || v.kind == "number":
			t := v.s
			if v.kind == "number" {
				t = string(v.raw)
			}
			kind, counted = m.kinds[t]
		default:
			return unmapped("type: " + ptr + ": must be a string or a number, got " + v.kind)
		}
	}
	if !counted {
		return Event{}, nil
	}
	ev := Event{Counted: true}
	ev.Kind = kind
	name := func(field int) (string, *Error) {
		v, ptr := value(field)
		label := mFieldNames[field] + ": " + ptr
		switch {
		case v == nil:
			return "", &Error{ReasonUnmapped, missing(field)}
		case v.kind == "number" && !bytes.ContainsAny(v.raw, ".eE"):
			return string(v.raw), nil
		case v.kind != "string":
			return "", &Error{ReasonUnmapped, label + ": must be a string or an integer, got " + v.kind}
		}
		if msg := refNameLen(label, v.raw, v.s, maxName); msg != "" {
			return "", &Error{ReasonInvalid, msg}
		}
		return v.s, nil
	}
	var err *Error
	if ev.Room, err = name(mRoom); err != nil {
		return Event{}, err
	}
	if ev.User, err = name(userField); err != nil {
		return Event{}, err
	}
	ev.TS = now
	if len(m.ptrs[mTS]) > 0 {
		v, ptr := value(mTS)
		if v == nil {
			return unmapped(missing(mTS))
		}
		ts, e := refMappedTS(v, "ts: "+ptr, m.unit)
		if e != nil {
			return Event{}, e
		}
		if ts-now > maxSkewMs {
			return Event{}, &Error{ReasonFuture, fmt.Sprintf("ts: %s is %s ahead of the clock, more than the allowed skew of %s",
				chat.Time(ts), formatMs(ts-now), formatMs(maxSkewMs))}
		}
		ev.TS = ts
	}
	if v, _ := value(mID); v != nil && v.kind == "number" && !bytes.ContainsAny(v.raw, ".eE") {
		ev.ID = string(v.raw)
	} else {
		ev.ID, _ = str(mID)
	}
	ev.Text, ev.HasText = str(mText)
	if v, _ := value(mMentions); v != nil && v.kind == "array" {
		for _, e := range v.elems {
			if e.kind == "string" {
				ev.Mentions = append(ev.Mentions, e.s)
			}
		}
	}
	// Matrix: the room mention counts as one more user, none of those
	// named.
	if v, _ := value(mRoomMention); v != nil && string(v.raw) == "true" {
		name := "@room"
		for n := 2; slices.Contains(ev.Mentions, name); n++ {
			name = fmt.Sprint("@room ", n)
		}
		ev.Mentions = append(ev.Mentions, name)
	}
	return ev, nil
}

// refMappedTS reads a ts in its unit, as ParseMapping documents it.
func refMappedTS(v *refNode, label string, unit tsUnit) (int64, *Error) {
	unmapped := func(msg string) (int64, *Error) { return 0, &Error{ReasonUnmapped, label + ": " + msg} }
	invalid := func(msg string) (int64, *Error) { return 0, &Error{ReasonInvalid, label + ": " + msg} }
	switch unit {
	case tsRFC3339:
		if v.kind != "string" {
			return unmapped("must be an RFC 3339 string, got " + v.kind)
		}
		t, ok := refParseTime(v.s)
		if !ok {
			return unmapped(fmt.Sprintf("must be an RFC 3339 timestamp, got %q", refClip(v.s)))
		}
		if ms := t.UnixMilli(); ms >= 0 && ms <= MaxTS {
			return ms, nil
		}
		return invalid(fmt.Sprintf("must be within years 1970..9999 UTC, got %q", refClip(v.s)))
	case tsMs:
		lit, quoted := string(v.raw), false
		switch v.kind {
		case "string":
			lit, quoted = v.s, true
		case "number":
		default:
			return unmapped("must be integer Unix milliseconds, got " + v.kind)
		}
		shown := refClip(lit)
		if quoted {
			shown = strconv.Quote(shown)
		}
		ok := len(lit) > 0 && !strings.ContainsAny(lit, ".eE+ ") && !(quoted && strings.HasPrefix(lit, "-"))
		digits := strings.TrimPrefix(lit, "-")
		ok = ok && digits != "" && strings.Trim(digits, "0123456789") == "" && (len(digits) == 1 || digits[0] != '0')
		if !ok {
			return unmapped("must be integer Unix milliseconds, got " + shown)
		}
		ms, err := strconv.ParseInt(lit, 10, 64)
		if err != nil || ms < 0 || ms > MaxTS || lit[0] == '-' && ms != 0 {
			return invalid("must be 0..253402300799999 (Unix ms, years 1970..9999), got " + shown)
		}
		return ms, nil
	default: // seconds
		lit := string(v.raw)
		switch v.kind {
		case "string":
			lit = v.s
		case "number":
		default:
			return unmapped("must be Unix seconds, got " + v.kind)
		}
		whole, frac, hasFrac := strings.Cut(lit, ".")
		neg := v.kind == "number" && strings.HasPrefix(whole, "-") // a sign: a number, not a string's digits
		if neg {
			whole = whole[1:]
		}
		ok := whole != "" && strings.Trim(whole, "0123456789") == "" && (len(whole) == 1 || whole[0] != '0') &&
			(!hasFrac || frac != "" && strings.Trim(frac, "0123456789") == "")
		if !ok {
			return unmapped("must be Unix seconds, a number without exponent, got " + refClip(lit))
		}
		s, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || s > MaxTS/1000 || neg && (s != 0 || strings.Trim(frac, "0") != "") {
			return invalid("must be 0..253402300799 (Unix seconds, years 1970..9999), got " + refClip(lit))
		}
		frac = (frac + "000")[:3]
		f, _ := strconv.ParseInt(frac, 10, 64)
		return s*1000 + f, nil
	}
}

// refNameLen is refNameProblem with names of up to maxLen bytes, the
// problem prefixed with label.
func refNameLen(label string, raw []byte, s string, maxLen int) string {
	if !utf8.Valid(raw) || refUnpairedSurrogate(raw) {
		return label + ": must be valid UTF-8"
	}
	if len(s) < 1 || len(s) > maxLen {
		return fmt.Sprintf("%s: must be 1..%d bytes, got %d", label, maxLen, len(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("%s: must not contain control characters, got %U", label, r)
		}
	}
	return ""
}

func visit(visits map[string]map[int]bool, ptr string, at int) {
	if visits[ptr] == nil {
		visits[ptr] = map[int]bool{}
	}
	visits[ptr][at] = true
}

// refNode is a JSON value as encoding/json reads it, every member of an
// object kept in order, duplicates too.
type refNode struct {
	kind    string // refKind's
	raw     []byte
	s       string // a string's value
	at      int    // where it lies in the payload
	members []refMember
	elems   []*refNode
}

type refMember struct {
	key string
	at  int // where its key ends in the payload
	val *refNode
}

// refTree parses valid JSON raw, which lies at offset at of the payload.
func refTree(raw []byte, at int) *refNode {
	n := &refNode{kind: refKind(raw), raw: raw, at: at}
	switch n.kind {
	case "string":
		if err := json.Unmarshal(raw, &n.s); err != nil {
			panic(err)
		}
	case "object", "array":
		dec := json.NewDecoder(bytes.NewReader(raw))
		if _, err := dec.Token(); err != nil {
			panic(err)
		}
		for dec.More() {
			var key string
			keyAt := 0
			if n.kind == "object" {
				tok, err := dec.Token()
				if err != nil {
					panic(err)
				}
				key, keyAt = tok.(string), at+int(dec.InputOffset())
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				panic(err)
			}
			child := refTree(v, at+int(dec.InputOffset())-len(v))
			if n.kind == "object" {
				n.members = append(n.members, refMember{key: key, at: keyAt, val: child})
			} else {
				n.elems = append(n.elems, child)
			}
		}
	}
	return n
}
