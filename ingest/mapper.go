package ingest

import (
	"fmt"
	"unicode/utf8"

	"github.com/chatpulse/chatpulse/chat"
)

// mapper holds the scan of one payload through a plan.
type mapper struct {
	scanner
	p    *plan
	vals [maxSlots]val
	seen [maxNodes / 64]uint64
	dup  int // 1 + the first node reached twice (a key given twice on a pointer's way); 0: none
}

// decode decodes one payload through p.
func (p *plan) decode(data []byte, maxName int, now, maxSkewMs int64) (Event, *Error) {
	d := mapper{scanner: scanner{data: data}, p: p}
	i := skipWS(data, 0)
	if i == len(data) {
		return Event{}, &Error{ReasonMalformed, "no JSON value in payload"}
	}
	if data[i] != '{' {
		if k := kindOf(data[i]); k != "" {
			return Event{}, &Error{ReasonMalformed, "payload must be a JSON object, got " + k}
		}
		return Event{}, d.unexpected(i, "looking for a value")
	}
	d.i = i
	if err := d.walk(0, 0); err != nil {
		return Event{}, err
	}
	if i = skipWS(data, d.i); i != len(data) {
		return Event{}, d.syntax(i, "data after the top-level object")
	}
	if d.dup != 0 {
		return Event{}, &Error{ReasonInvalid, p.nodes[d.dup-1].ptr + ": duplicate key"}
	}
	return d.event(maxName, now, maxSkewMs)
}

// walk scans the value at d.i, which is at node n, inside depth
// containers.
func (d *mapper) walk(n, depth int) *Error {
	nd := &d.p.nodes[n]
	if d.seen[n>>6]&(1<<(n&63)) != 0 && d.dup == 0 {
		d.dup = n + 1
	}
	d.seen[n>>6] |= 1 << (n & 63)
	var v val
	var err *Error
	switch c := d.peek(); {
	case c == '{' && nd.keys:
		v.kind, err = c, d.object(nd, depth)
	case c == '[' && nd.indexes:
		v.kind, err = c, d.array(nd, depth)
	default:
		v, err = d.scanVal(depth)
	}
	if err != nil {
		return err
	}
	for _, s := range nd.slots {
		d.vals[s] = v
	}
	return nil
}

// object scans the object at d.i, at node nd, walking down the members
// the plan names and skipping the others.
func (d *mapper) object(nd *pnode, depth int) *Error {
	data := d.data
	if depth >= MaxDepth {
		return &Error{ReasonMalformed, fmt.Sprintf("nesting deeper than %d levels at byte %d", MaxDepth, d.i)}
	}
	i := skipWS(data, d.i+1)
	if i < len(data) && data[i] == '}' {
		d.i = i + 1
		return nil
	}
	for {
		key, next, err := d.str(i)
		if err != nil {
			return err
		}
		child := d.child(nd, key)
		if i, err = d.colon(next); err != nil {
			return err
		}
		d.i = i
		more, err := d.member(child, depth, '}', "after object field value")
		if !more {
			return err
		}
		i = d.i
	}
}

// array scans the array at d.i, at node nd, walking down the elements the
// plan names and skipping the others.
func (d *mapper) array(nd *pnode, depth int) *Error {
	data := d.data
	if depth >= MaxDepth {
		return &Error{ReasonMalformed, fmt.Sprintf("nesting deeper than %d levels at byte %d", MaxDepth, d.i)}
	}
	i := skipWS(data, d.i+1)
	if i < len(data) && data[i] == ']' {
		d.i = i + 1
		return nil
	}
	for index := 0; ; index++ {
		d.i = i
		child := -1
		for _, c := range nd.children {
			if d.p.nodes[c].index == index {
				child = int(c)
				break
			}
		}
		more, err := d.member(child, depth, ']', "after array element")
		if !more {
			return err
		}
		i = d.i
	}
}

// member walks the value at d.i down node child (-1: skips it), then reads
// what follows it in its container: a comma, after which more members come
// (d.i at the next), or close, which ends the container (d.i past it).
func (d *mapper) member(child, depth int, close byte, what string) (more bool, err *Error) {
	if child >= 0 {
		err = d.walk(child, depth+1)
	} else {
		err = d.skip(depth + 1)
	}
	if err != nil {
		return false, err
	}
	data := d.data
	i := skipWS(data, d.i)
	switch {
	case i < len(data) && data[i] == ',':
		d.i = skipWS(data, i+1)
		return true, nil
	case i < len(data) && data[i] == close:
		d.i = i + 1
		return false, nil
	}
	return false, d.unexpected(i, what)
}

// child is the child of nd that the object key names, or -1. A key
// matches a token when it unescapes to it, invalid UTF-8 read as U+FFFD
// (as encoding/json reads keys).
func (d *mapper) child(nd *pnode, key str) int {
	raw := d.data[key.start:key.end]
	if key.esc || key.other && !utf8.Valid(raw) {
		// No byte of a token takes more than 6 bytes of a key.
		if len(raw) > 6*d.p.maxToken {
			return -1
		}
		var buf [64]byte
		raw, _ = appendUnescaped(buf[:0], raw)
	}
	for _, c := range nd.children {
		if d.p.nodes[c].key == string(raw) {
			return int(c)
		}
	}
	return -1
}

// first is the value of field: that of its first pointer that is present
// and not null, with its slot; slot -1 when there is none.
func (d *mapper) first(field int) (int, val) {
	for _, s := range d.p.fields[field] {
		if d.vals[s].present() {
			return int(s), d.vals[s]
		}
	}
	return -1, val{}
}

// is reports whether field is the string want.
func (d *mapper) is(field int, want string) bool {
	_, v := d.first(field)
	s, ok := d.text(v)
	return ok && s == want
}

// has reports whether field has a value.
func (d *mapper) has(field int) bool {
	s, _ := d.first(field)
	return s >= 0
}

// event reads the kept values into an event, in this order: its kind (an
// event of no kind the counters take is ignored, and nothing else of it is
// read), room, user, ts, then id, text and mentions. Faults of the mapping (nothing
// there, a JSON type the field cannot hold, a ts that does not parse) are
// unmapped; values against docs/contract.md section 1 invalid, a ts too far ahead
// future.
func (d *mapper) event(maxName int, now, maxSkewMs int64) (Event, *Error) {
	p := d.p
	kind, counted, user := chat.KindMessage, true, mUser
	if p.rules == matrixRules {
		kind, counted, user = matrixKind(d)
	} else if len(p.fields[mType]) > 0 {
		var err *Error
		if kind, counted, err = d.mappedKind(); err != nil {
			return Event{}, err
		}
	}
	if !counted {
		return Event{}, nil
	}
	ev := Event{Counted: true}
	ev.Kind = kind
	var err *Error
	if ev.Room, err = d.name(mRoom, maxName); err != nil {
		return Event{}, err
	}
	if ev.User, err = d.name(user, maxName); err != nil {
		return Event{}, err
	}
	ev.TS = now
	if len(p.fields[mTS]) > 0 {
		s, v := d.first(mTS)
		if s < 0 {
			return Event{}, &Error{ReasonUnmapped, p.missing[mTS]}
		}
		ts, flt, msg := d.ts(v, p.labels[s], p.unit)
		if err := faultError(flt, msg); err != nil {
			return Event{}, err
		}
		if err := future(ts, now, maxSkewMs); err != nil {
			return Event{}, err
		}
		ev.TS = ts
	}
	if _, v := d.first(mID); v.kind == '0' {
		ev.ID = alias(d.lit(v))
	} else {
		ev.ID, _ = d.text(v)
	}
	_, v := d.first(mText)
	ev.Text, ev.HasText = d.text(v)
	_, v = d.first(mMentions)
	ev.Mentions = d.mentions(v)
	if _, v := d.first(mRoomMention); d.isTrue(v) {
		ev.Mentions = append(ev.Mentions, roomMention(ev.Mentions))
	}
	return ev, nil
}

// mappedKind is what the type says, by the mapping's type values. A
// number is matched as written.
func (d *mapper) mappedKind() (chat.Kind, bool, *Error) {
	s, v := d.first(mType)
	var t string
	switch v.kind {
	case 0:
		if d.p.absent != nil {
			return *d.p.absent, true, nil
		}
		return chat.KindMessage, false, nil
	case '"':
		t, _ = d.text(v)
	case '0', '.':
		t = alias(d.lit(v))
	default:
		return 0, false, &Error{ReasonUnmapped, d.p.labels[s] + ": must be a string or a number, got " + kindName(v)}
	}
	k, ok := d.p.kinds[t]
	return k, ok, nil
}

// name reads field as a room or user name.
func (d *mapper) name(field, maxName int) (string, *Error) {
	s, v := d.first(field)
	if s < 0 {
		return "", &Error{ReasonUnmapped, d.p.missing[field]}
	}
	name, flt, msg := d.scanner.name(v, d.p.labels[s], maxName, true)
	return name, faultError(flt, msg)
}

// faultError is a mapped value's fault as the error it is rejected with.
func faultError(flt fault, msg string) *Error {
	switch flt {
	case faultNone:
		return nil
	case faultValue:
		return &Error{ReasonInvalid, msg}
	}
	return &Error{ReasonUnmapped, msg}
}
