package ingest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// Limits of an accepted event (docs/contract.md section 1, plus the choices Decode
// documents).
const (
	// MaxPayload is the largest payload Decode parses; longer ones are
	// too_large without being looked at.
	MaxPayload = 64 << 10
	// MaxDepth is the deepest nesting of objects and arrays, counting the
	// top-level object as 1. Deeper payloads are malformed: the scanner keeps
	// its container stack in one machine word, and no chat event needs more.
	MaxDepth = 64
	// MinTS and MaxTS bound ts in Unix milliseconds: 1970-01-01T00:00:00.000Z
	// to 9999-12-31T23:59:59.999Z. Anything outside is invalid, whether it
	// came as a number or as a string.
	MinTS = 0
	MaxTS = 253402300799999
)

// Event is one decoded chat event: the chat.Event that the aggregator and
// the throttle policies take, and what else Decode learned of it.
//
// Room, User, ID and Text alias the payload (no copy) when they hold no
// escapes, so the payload must not be modified while the Event is in use,
// and callers that keep one of them beyond that (a map key, say) must copy
// it, e.g. with strings.Clone.
//
// TS is the event's ts, or now when ts is absent or null. Text is the text
// field when it is a JSON string, "" otherwise; ID likewise; Mentions the
// strings of the mentions array. Invalid UTF-8 and unpaired surrogate
// escapes in them are replaced by U+FFFD, as encoding/json does, so all
// are always valid UTF-8.
type Event struct {
	chat.Event
	// HasText is true when text is a JSON string, "" included.
	HasText bool
	// Counted is true when the event is of a kind the counters take:
	// Kind says which (type absent, null or "message": a message; "join",
	// "leave"). False: another type (edit, reaction, ""...), accepted and
	// ignored by the counters.
	Counted bool
}

// Reason is why an event was rejected. It is the reason label of
// chatpulse_events_rejected_total and the last token of the dead-letter
// subject chatpulse.deadletter.<reason>.
type Reason string

// The rejection reasons of docs/contract.md section 1. When a payload has several
// problems, Decode reports the first of too_large, malformed, invalid,
// future; within one reason, the first problem in payload order, and a
// missing room or user after every other invalid field.
const (
	ReasonMalformed Reason = "malformed" // not one JSON object, or a wrong JSON type for room, user, ts or type
	ReasonInvalid   Reason = "invalid"   // missing or bad room or user, bad ts, duplicate field
	ReasonTooLarge  Reason = "too_large" // more than MaxPayload bytes (a Format's MaxPayload)
	ReasonLate      Reason = "late"      // older than every window: decided by the aggregator, never by Decode
	ReasonFuture    Reason = "future"    // ts more than the allowed skew ahead of now
	// ReasonUnmapped: a payload read through a mapping (docs/contract.md section
	// 13) has no usable value where the mapping points: a pointer
	// missing, the wrong JSON type there, a ts that does not parse.
	ReasonUnmapped Reason = "unmapped"
	// ReasonSubjectMismatch: in a group, the subject does not name the
	// payload's room and user (docs/contract.md section 8); decided by the sink,
	// never by Decode.
	ReasonSubjectMismatch Reason = "subject_mismatch"
)

// Reasons returns every rejection reason, so that each labelled metric
// series can be exported at 0 from the start.
func Reasons() []Reason {
	return []Reason{ReasonMalformed, ReasonInvalid, ReasonTooLarge, ReasonLate, ReasonFuture, ReasonSubjectMismatch, ReasonUnmapped}
}

// Error is a rejected event. Msg is one human-readable line naming the
// field and the problem (`room: must be 1..128 bytes, got 0`), fit for the
// Chatpulse-Error header: values from the payload are quoted with Go
// escapes and clipped to 64 bytes, so it holds no control characters.
type Error struct {
	Reason Reason
	Msg    string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Msg }

// Decode decodes and validates one event payload of chatpulse's own
// format (docs/contract.md section 1) in a single pass over data, without
// reflection. It allocates only when a string it
// extracts (room, user, ts, type, id, text, a mention) holds escapes or
// invalid UTF-8, for the list of an event's mentions, and for the *Error
// of a rejected event. now is the wall clock in
// Unix milliseconds (used for an absent ts and for the future check) and
// maxSkewMs the allowed lead of ts over it (>= 0).
//
// Every non-nil error is an *Error; the Event is then the zero Event.
//
// Beyond docs/contract.md section 1, Decode decides:
//   - Field names match exactly and case-sensitively after unescaping
//     ("r\u006fom" is room, "Room" is not), unlike encoding/json.
//   - room, user, ts, type, id, text or mentions twice: invalid, "room:
//     duplicate key".
//   - null for any of the six fields means absent: room or user null is
//     "missing" (invalid); ts null takes now; type null counts as a
//     message; id or text null has none.
//   - room and user are checked after unescaping, in this order: valid
//     UTF-8 (an unpaired surrogate escape such as \ud800 is not), 1..128
//     bytes, no unicode.IsControl rune (C0, DEL, C1; escaped ones too).
//   - ts as a number must be an integer literal (no fraction, no exponent,
//     even 1e3 or 1.0: invalid) within MinTS..MaxTS; -0 is 0.
//   - ts as a string must be RFC 3339 as time.Parse's strict path reads it:
//     YYYY-MM-DDTHH:MM:SS, optional fraction of any length, then Z or
//     ±HH:MM; upper-case T and Z only, no leap second, real calendar days,
//     offset hours 00..23. Sub-millisecond digits are truncated, and the
//     instant must lie within MinTS..MaxTS.
//   - type "message", "join" and "leave" (case-sensitive) are those
//     kinds; "" or any other string is not counted (Counted false), though
//     room, user and ts must still be valid.
//   - id and text are read when they are JSON strings; any other value is
//     ignored, as if absent.
//   - mentions is read when it is a JSON array: its string elements, in
//     order, repeats kept, each read as text is; other elements are
//     skipped, and any other value is ignored, as if absent.
//   - Strings outside room and user may hold invalid UTF-8 (accepted, as by
//     encoding/json); every string must still be a valid JSON string.
//   - Nesting deeper than MaxDepth is malformed, even in ignored fields.
func Decode(data []byte, now, maxSkewMs int64) (Event, error) {
	if len(data) > MaxPayload {
		return Event{}, tooLarge(len(data), MaxPayload)
	}
	ev, err := decodeNative(data, chat.MaxNameLen, now, maxSkewMs)
	if err != nil {
		return Event{}, err
	}
	return ev, nil // not err: a nil *Error in an error is not a nil error
}

func tooLarge(n, limit int) *Error {
	return &Error{ReasonTooLarge, fmt.Sprintf("payload is %d bytes, more than the limit of %d", n, limit)}
}

// decodeNative is the native front end's whole decode, past the size
// check.
func decodeNative(data []byte, maxName int, now, maxSkewMs int64) (Event, *Error) {
	d := decoder{scanner: scanner{data: data}, maxName: maxName}
	var ev Event
	ts, hasTS, err := d.object(&ev)
	if err != nil {
		return Event{}, err
	}
	if d.invalid != nil {
		return Event{}, d.invalid
	}
	if !hasTS {
		ev.TS = now
		return ev, nil
	}
	if err := future(ts, now, maxSkewMs); err != nil {
		return Event{}, err
	}
	ev.TS = ts
	return ev, nil
}

// future rejects a ts more than maxSkewMs ahead of now.
func future(ts, now, maxSkewMs int64) *Error {
	if lead := ts - now; lead > maxSkewMs {
		return &Error{ReasonFuture, fmt.Sprintf("ts: %s is %s ahead of the clock, more than the allowed skew of %s",
			chat.Time(ts), formatMs(lead), formatMs(maxSkewMs))}
	}
	return nil
}

// formatMs writes milliseconds as a Go duration where one can hold them.
func formatMs(ms int64) string {
	const limit = int64(1<<63-1) / int64(time.Millisecond)
	if ms > limit || ms < -limit {
		return strconv.FormatInt(ms, 10) + "ms"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
