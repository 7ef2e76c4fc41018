package ingest

import (
	"fmt"
	"strings"

	"github.com/chatpulse/chatpulse/chat"
)

// This file is what both front ends share beyond the scanner: a scanned
// value (val) and what a field makes of it. The native front end reads a
// field's value as it meets it; the mapping front end keeps the values its
// pointers reach and reads them after the scan. Either way the same
// functions read them, and say what is wrong in the same words.

// val is one scanned JSON value.
type val struct {
	kind byte // 0: absent, and kindOf's first byte otherwise ('"', 'n', 't', '{', '['), '0' an integer, '.' another number
	// s is a string's content; for a number, true, false, an object or
	// an array, its text, start to end.
	s str
}

// present reports whether v holds a value: null is absent, as everywhere
// in the contract.
func (v val) present() bool { return v.kind != 0 && v.kind != 'n' }

// fault is what is wrong with a field's value. The front ends report
// faults under reasons of their own: a native payload's wrong type is
// malformed, a mapped one's unmapped (the mapping does not fit the
// payload), and so on.
type fault uint8

const (
	faultNone  fault = iota
	faultType        // a JSON type the field cannot hold
	faultParse       // the right type, not readable as the field (a ts that does not parse)
	faultValue       // read, and against the rules of docs/contract.md section 1
)

// scanVal scans the JSON value at sc.i, which lies inside depth
// containers: strings and numbers are kept, containers checked and
// skipped.
func (sc *scanner) scanVal(depth int) (val, *Error) {
	if sc.i >= len(sc.data) {
		return val{}, sc.unexpected(sc.i, "looking for a value")
	}
	switch c := sc.data[sc.i]; c {
	case '"':
		s, next, err := sc.str(sc.i)
		sc.i = next
		return val{kind: '"', s: s}, err
	case 'n':
		return val{kind: 'n'}, sc.literal("null")
	case 't', 'f':
		start, lit := sc.i, "true"
		if c == 'f' {
			lit = "false"
		}
		err := sc.literal(lit)
		return val{kind: 't', s: str{start: start, end: sc.i}}, err
	case '{', '[':
		start := sc.i
		err := sc.skip(depth)
		return val{kind: c, s: str{start: start, end: sc.i}}, err
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		start := sc.i
		integer, err := sc.number()
		kind := byte('.')
		if integer {
			kind = '0'
		}
		return val{kind: kind, s: str{start: start, end: sc.i}}, err
	}
	return val{}, sc.unexpected(sc.i, "looking for a value")
}

// kindName names v's JSON type for an error message.
func kindName(v val) string {
	switch v.kind {
	case '0', '.':
		return "number"
	case 0:
		return "nothing"
	}
	return kindOf(v.kind)
}

// lit is a number's literal.
func (sc *scanner) lit(v val) []byte { return sc.data[v.s.start:v.s.end] }

// name reads a room or user of at most maxLen bytes: a string, or with
// numbers (a mapping's ids) an integer as written. field prefixes the
// problem.
func (sc *scanner) name(v val, field string, maxLen int, numbers bool) (string, fault, string) {
	switch {
	case v.kind == '0' && numbers:
		return alias(sc.lit(v)), faultNone, ""
	case v.kind != '"':
		want := "a string"
		if numbers {
			want = "a string or an integer"
		}
		return "", faultType, field + ": must be " + want + ", got " + kindName(v)
	}
	s, bad := sc.value(v.s)
	if bad {
		return "", faultValue, field + ": must be valid UTF-8"
	}
	if err := chat.CheckNameLen(field, s, maxLen); err != nil {
		return "", faultValue, err.Error()
	}
	return s, faultNone, ""
}

// tsUnit is how a ts is written.
type tsUnit uint8

const (
	tsNative  tsUnit = iota // docs/contract.md section 1: an RFC 3339 string or integer Unix milliseconds
	tsMs                    // integer Unix milliseconds, as a number or a string
	tsSeconds               // Unix seconds with an optional fraction, as a number or a string
	tsRFC3339               // an RFC 3339 string
)

// ts reads a ts written in unit: Unix milliseconds within MinTS..MaxTS.
// field prefixes the problem.
func (sc *scanner) ts(v val, field string, unit tsUnit) (int64, fault, string) {
	switch {
	case v.kind == '"' && unit != tsMs && unit != tsSeconds:
		s, _ := sc.value(v.s)
		ms, ok := parseRFC3339(s)
		if !ok {
			return 0, faultParse, fmt.Sprintf("%s: must be an RFC 3339 timestamp, got %q", field, clip(s))
		}
		if ms < MinTS || ms > MaxTS {
			return 0, faultValue, fmt.Sprintf("%s: must be within years 1970..9999 UTC, got %q", field, clip(s))
		}
		return ms, faultNone, ""
	case v.kind == '"' || v.kind == '0' || v.kind == '.':
		if unit == tsRFC3339 {
			break
		}
		lit := alias(sc.lit(v))
		if v.kind == '"' {
			lit, _ = sc.value(v.s)
		}
		switch {
		case unit == tsSeconds:
			return secondsTS(lit, field, v.kind == '"')
		case v.kind == '0': // an integer literal already
			if ms, ok := parseMs(lit); ok {
				return ms, faultNone, ""
			}
		}
		return msTS(lit, field, v.kind == '"')
	}
	want := "an RFC 3339 string or integer Unix milliseconds"
	switch unit {
	case tsMs:
		want = "integer Unix milliseconds"
	case tsSeconds:
		want = "Unix seconds"
	case tsRFC3339:
		want = "an RFC 3339 string"
	}
	return 0, faultType, field + ": must be " + want + ", got " + kindName(v)
}

// msTS reads integer Unix milliseconds: a JSON integer literal, or when
// quoted, digits alone.
func msTS(lit string, field string, quoted bool) (int64, fault, string) {
	if !isInteger(lit, quoted) {
		return 0, faultParse, field + ": must be integer Unix milliseconds, got " + quote(lit, quoted)
	}
	ms, ok := parseMs(lit)
	if !ok {
		return 0, faultValue, field + ": must be 0..253402300799999 (Unix ms, years 1970..9999), got " + quote(lit, quoted)
	}
	return ms, faultNone, ""
}

// secondsTS reads Unix seconds: digits, then optionally '.' and digits
// (those past milliseconds truncated), as a JSON number without exponent
// (a number may have a sign: a negative one is a value out of range, as
// in milliseconds).
func secondsTS(lit string, field string, quoted bool) (int64, fault, string) {
	whole, frac, hasFrac := strings.Cut(lit, ".")
	ok := isInteger(whole, quoted) && (!hasFrac || frac != "")
	for i := 0; i < len(frac); i++ {
		ok = ok && isDigit(frac[i])
	}
	if !ok {
		return 0, faultParse, field + ": must be Unix seconds, a number without exponent, got " + clip(lit)
	}
	// MaxTS/1000 has 12 digits, and no leading zeros.
	s, okS := parseMs(strings.TrimPrefix(whole, "-"))
	if !okS || len(whole) > 12 || s > MaxTS/1000 || whole[0] == '-' && (s != 0 || strings.Trim(frac, "0") != "") {
		return 0, faultValue, field + ": must be 0..253402300799 (Unix seconds, years 1970..9999), got " + clip(lit)
	}
	ms := s * 1000
	for i, scale := 0, int64(100); i < len(frac) && i < 3; i, scale = i+1, scale/10 {
		ms += int64(frac[i]-'0') * scale
	}
	return ms, faultNone, ""
}

// isInteger reports whether lit is a JSON integer literal: an optional
// '-' (not when quoted), then 0 or digits without a leading zero.
func isInteger(lit string, quoted bool) bool {
	if len(lit) > 0 && lit[0] == '-' && !quoted {
		lit = lit[1:]
	}
	if len(lit) == 0 || len(lit) > 1 && lit[0] == '0' {
		return false
	}
	for i := 0; i < len(lit); i++ {
		if !isDigit(lit[i]) {
			return false
		}
	}
	return true
}

func quote(lit string, quoted bool) string {
	if quoted {
		return fmt.Sprintf("%q", clip(lit))
	}
	return clip(lit)
}

// text reads an optional string field (text, id, type): its value when it
// is a string, "" and false for anything else.
func (sc *scanner) text(v val) (string, bool) {
	if v.kind != '"' {
		return "", false
	}
	s, _ := sc.value(v.s)
	return s, true
}

// isTrue reports whether v is the literal true.
func (sc *scanner) isTrue(v val) bool { return v.kind == 't' && sc.data[v.s.start] == 't' }

// mentions reads a mentions field (docs/contract.md section 15): an
// array's string elements, in order, repeats kept, each read as text is.
// Any other element is skipped, and any other value, as null, gives none:
// like id and text, mentions never make an event rejected. The array was
// checked when it was scanned, so reading it again cannot fail.
func (sc *scanner) mentions(v val) []string {
	if v.kind != '[' {
		return nil
	}
	sub := scanner{data: sc.data[:v.s.end], i: v.s.start + 1}
	var names []string
	for {
		sub.i = skipWS(sub.data, sub.i)
		if sub.i >= len(sub.data) {
			return names
		}
		switch sub.data[sub.i] {
		case ']':
			return names
		case ',':
			sub.i++
		case '"':
			s, next, err := sub.str(sub.i)
			if err != nil {
				return names
			}
			name, _ := sub.value(s)
			names = append(names, name)
			sub.i = next
		default:
			if sub.skip(1) != nil {
				return names
			}
		}
	}
}
