// Package chat is the event model the rest of chatpulse shares: one chat
// message (Event), the rule every room and user name follows (CheckName),
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
	"time"
	"unicode"
	"unicode/utf8"
)

// Event is one chat message. Room, User and Text may alias the buffer it
// was decoded from: whoever keeps one of them copies it.
type Event struct {
	Room, User string
	TS         int64  // Unix milliseconds
	Text       string // "" when the message has none
}

// MaxNameLen is the longest room or user name, in bytes.
const MaxNameLen = 128

// CheckName reports what is wrong with a room or user name, naming field
// in the error: a name is valid UTF-8, 1..MaxNameLen bytes, without control
// characters (C0, DEL, C1), and the first of these it breaks is reported.
func CheckName(field, v string) error {
	plain := len(v) // the length of the plain printable ASCII prefix
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f {
			plain = i
			break
		}
	}
	rest := v[plain:]
	if !utf8.ValidString(rest) {
		return fmt.Errorf("%s: must be valid UTF-8", field)
	}
	if len(v) == 0 || len(v) > MaxNameLen {
		return fmt.Errorf("%s: must be 1..%d bytes, got %d", field, MaxNameLen, len(v))
	}
	for _, r := range rest {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s: must not contain control characters, got %U", field, r)
		}
	}
	return nil
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
