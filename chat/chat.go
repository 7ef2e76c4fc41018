// Package chat is the event model the rest of chatpulse shares: one chat
// event (Event: a message, a join or a leave), the rule every room and
// user name follows (CheckName),
// and the contract's instant (Time: Unix milliseconds that marshal as
// RFC 3339 UTC with milliseconds).
//
// It sits below every other package and imports none of them. It never
// reads the wall clock and never parses a payload: that is ingest's.
package chat

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Event is one chat event: a message, or a user joining or leaving a
// room. Room, User, ID, Text and Mentions may alias the buffer it was
// decoded from: whoever keeps one of them copies it.
type Event struct {
	Room, User string
	TS         int64  // Unix milliseconds
	Text       string // "" when the message has none
	ID         string // the event's id in its chat system; "" when it has none
	// Mentions are the users the event says it mentions, as it names
	// them: a name may come twice, and counts once (docs/contract.md
	// section 15). Nil when it mentions nobody.
	Mentions []string
	Kind     Kind
}

// Kind is what an event is. The zero value is a message, so that an
// Event written without one is what it always was.
type Kind uint8

const (
	KindMessage Kind = iota // a message posted in the room
	KindJoin                // the user joined the room
	KindLeave               // the user left the room
	// KindRepeat is a join or a leave that repeats its (room, user)'s
	// last one (a display name change is a join of a joined member): the
	// aggregator marks it so, and nothing counts it (docs/contract.md
	// section 12).
	KindRepeat
)

func (k Kind) String() string {
	switch k {
	case KindMessage:
		return "message"
	case KindJoin:
		return "join"
	case KindLeave:
		return "leave"
	case KindRepeat:
		return "repeat"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// MaxNameLen is the longest room or user name of chatpulse's own events,
// in bytes (docs/contract.md section 1).
const MaxNameLen = 128

// MaxForeignNameLen is the longest room or user name read from another
// chat system's events (docs/contract.md section 13): Matrix ids run to 255
// bytes.
const MaxForeignNameLen = 255

// CheckName reports what is wrong with a room or user name, naming field
// in the error: a name is valid UTF-8, 1..MaxNameLen bytes, without control
// characters (C0, DEL, C1), and the first of these it breaks is reported.
func CheckName(field, v string) error { return CheckNameLen(field, v, MaxNameLen) }

// CheckNameLen is CheckName with names of up to maxLen bytes.
func CheckNameLen(field, v string, maxLen int) error {
	ctl := rune(-1) // the first control character
	if !printable(v) {
		// One pass finds the first invalid byte and the first control
		// character; they are reported in the rule's order.
		for i, r := range v {
			if r >= 0x20 && r < 0x7f || r > 0x9f && r != utf8.RuneError {
				continue // not C0, DEL or C1 (U+0000..U+001F, U+007F..U+009F)
			}
			// An invalid byte decodes as U+FFFD, but is not its UTF-8.
			if r == utf8.RuneError && !strings.HasPrefix(v[i:], "\uFFFD") {
				return fmt.Errorf("%s: must be valid UTF-8", field)
			}
			if ctl < 0 && unicode.IsControl(r) {
				ctl = r
			}
		}
	}
	if len(v) == 0 || len(v) > maxLen {
		return fmt.Errorf("%s: must be 1..%d bytes, got %d", field, maxLen, len(v))
	}
	if ctl >= 0 {
		return fmt.Errorf("%s: must not contain control characters, got %U", field, ctl)
	}
	return nil
}

// printable reports whether v is all printable ASCII (0x20..0x7e), which
// most names are. CheckName runs on ingest's hot path, twice for every
// event, so printable tests 8 bytes at a time and does not loop over the
// bytes of a short name: it reads v in words, the last one overlapping the
// one before, and a name of 4 to 7 bytes as two overlapping halves.
func printable(v string) bool {
	n := len(v)
	switch {
	case n >= 8:
		for i := 0; i < n-8; i += 8 {
			if !printable8(word(v[i:])) {
				return false
			}
		}
		return printable8(word(v[n-8:]))
	case n >= 4:
		return printable8(half(v) | half(v[n-4:])<<32)
	}
	for i := 0; i < n; i++ {
		if v[i]-0x20 >= 0x7f-0x20 { // wraps around below 0x20
			return false
		}
	}
	return true
}

// printable8 reports whether each byte of w is printable ASCII.
func printable8(w uint64) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	// Bytes of 0x7f and up set their high bit in w or in w+lo; the lowest
	// byte below 0x20 sets its own in w-lo*0x20. Other bytes set none: every
	// carry or borrow starts at one of those.
	return (w|(w+lo)|(w-lo*0x20))&hi == 0
}

// word is the first 8 bytes of s, little-endian; half the first 4.
func word(s string) uint64 {
	_ = s[7]
	return half(s) | half(s[4:])<<32
}

func half(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// Never is the time of a clock that has seen nothing yet: before every
// instant.
const Never = math.MinInt64

// Layout is the contract's time format: RFC 3339, UTC, milliseconds.
const Layout = "2006-01-02T15:04:05.000Z07:00"

// Time is an instant in Unix milliseconds, the unit of every clock in
// chatpulse. It marshals as the contract's as_of: "2026-11-30T07:00:00.123Z".
type Time int64

// AppendFormat appends t in Layout.
func (t Time) AppendFormat(b []byte) []byte {
	return time.UnixMilli(int64(t)).UTC().AppendFormat(b, Layout)
}

func (t Time) String() string { return string(t.AppendFormat(make([]byte, 0, len(Layout)))) }

// MarshalJSON writes t as a JSON string in Layout.
func (t Time) MarshalJSON() ([]byte, error) {
	b := append(make([]byte, 0, len(Layout)+2), '"')
	return append(t.AppendFormat(b), '"'), nil
}

// UnmarshalJSON reads what MarshalJSON writes (any RFC 3339 time).
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = Time(v.UnixMilli())
	return nil
}

// Coverage says whether an answer merged from a group's partitions counts
// all of them (docs/contract.md section 8). Answers of one instance that holds
// everything carry none.
type Coverage struct {
	Complete          bool `json:"complete"`
	MissingPartitions int  `json:"missing_partitions"`
}
