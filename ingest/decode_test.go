package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/chatpulse/chatpulse/chat"
)

// The clock of every test: now is 2026-11-30T07:00:00Z, skew 5s.
var testNow = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC).UnixMilli()

const testSkew = 5000

// show quotes a payload for a failure message, clipped.
func show(data []byte) string {
	if len(data) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", data[:300], len(data))
	}
	return fmt.Sprintf("%q", data)
}

func ms(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

type decodeCase struct {
	name string
	in   string
	want Event  // when reason is ""
	rsn  Reason // expected rejection
	msg  string // expected Error.Msg
	now  int64  // the clock, when not testNow
}

func ok(name, in string, want Event) decodeCase { return decodeCase{name: name, in: in, want: want} }

func bad(name, in string, rsn Reason, msg string) decodeCase {
	return decodeCase{name: name, in: in, rsn: rsn, msg: msg}
}

// ev is the event most cases expect: room a, user b, no ts, counted.
func ev(mod func(*Event)) Event {
	e := Event{Event: chat.Event{Room: "a", User: "b", TS: testNow}, Counted: true}
	if mod != nil {
		mod(&e)
	}
	return e
}

// ab wraps fields between {"room":"a","user":"b", and }.
func ab(rest string) string { return `{"room":"a","user":"b"` + rest + `}` }

var long = strings.Repeat("x", 100)

var decodeCases = []decodeCase{
	// Accepted.
	ok("contract example", `{"id": "m-184467", "room": "lobby", "user": "alice", "ts": "2026-11-30T07:00:00.123Z", "text": "hi"}`,
		Event{Event: chat.Event{Room: "lobby", User: "alice", TS: ms("2026-11-30T07:00:00.123Z"), Text: "hi", ID: "m-184467"}, HasText: true, Counted: true}),
	ok("minimal", `{"room":"a","user":"b"}`, ev(nil)),
	ok("whitespace everywhere", " \r\n\t{ \"room\" :\t\"a\" ,\n\"user\"\r:\"b\" , \"text\" : \"t\" }\n ",
		ev(func(e *Event) { e.Text, e.HasText = "t", true })),
	ok("integer ts", ab(`,"ts":1796022000123`), ev(func(e *Event) { e.TS = 1796022000123 })),
	ok("integer ts 0", ab(`,"ts":0`), ev(func(e *Event) { e.TS = 0 })),
	ok("integer ts -0", ab(`,"ts":-0`), ev(func(e *Event) { e.TS = 0 })),
	{name: "integer ts max", in: ab(`,"ts":253402300799999`), want: ev(func(e *Event) { e.TS = MaxTS }), now: MaxTS},
	ok("ts null is absent", ab(`,"ts":null`), ev(nil)),
	ok("ts no fraction", ab(`,"ts":"2026-11-30T06:59:00Z"`), ev(func(e *Event) { e.TS = testNow - 60000 })),
	ok("ts one fraction digit", ab(`,"ts":"2026-11-30T06:59:00.1Z"`), ev(func(e *Event) { e.TS = testNow - 59900 })),
	ok("ts sub-ms truncated", ab(`,"ts":"2026-11-30T06:59:00.123999999999Z"`), ev(func(e *Event) { e.TS = testNow - 59877 })),
	ok("ts positive offset", ab(`,"ts":"2026-11-30T08:00:00+01:00"`), ev(nil)),
	ok("ts negative offset", ab(`,"ts":"2026-11-30T01:30:00-05:30"`), ev(nil)),
	ok("ts -00:00", ab(`,"ts":"2026-11-30T07:00:00-00:00"`), ev(nil)),
	ok("ts leap day", ab(`,"ts":"2024-02-29T00:00:00Z"`), ev(func(e *Event) { e.TS = ms("2024-02-29T00:00:00Z") })),
	ok("ts epoch", ab(`,"ts":"1970-01-01T00:00:00Z"`), ev(func(e *Event) { e.TS = 0 })),
	ok("ts escaped", ab(`,"ts":"2026-11-30T07:00:00\u002e5Z"`), ev(func(e *Event) { e.TS = testNow + 500 })),
	ok("ts exactly max skew ahead", ab(`,"ts":"2026-11-30T07:00:05Z"`), ev(func(e *Event) { e.TS = testNow + testSkew })),
	ok("ts long ago (late is not Decode's call)", ab(`,"ts":"2001-01-01T00:00:00Z"`), ev(func(e *Event) { e.TS = ms("2001-01-01T00:00:00Z") })),
	ok("type message", ab(`,"type":"message"`), ev(nil)),
	ok("type escaped message", ab(`,"type":"messag\u0065"`), ev(nil)),
	ok("type null counts", ab(`,"type":null`), ev(nil)),
	ok("type join", ab(`,"type":"join"`), ev(func(e *Event) { e.Kind = chat.KindJoin })),
	ok("type leave", ab(`,"type":"leave"`), ev(func(e *Event) { e.Kind = chat.KindLeave })),
	ok("type escaped join", ab(`,"type":"jo\u0069n"`), ev(func(e *Event) { e.Kind = chat.KindJoin })),
	ok("type Join is not join", ab(`,"type":"Join"`), ev(func(e *Event) { e.Counted = false })),
	ok("type edit ignored", ab(`,"type":"edit"`), ev(func(e *Event) { e.Counted = false })),
	ok("type empty ignored", ab(`,"type":""`), ev(func(e *Event) { e.Counted = false })),
	ok("type is case-sensitive", ab(`,"type":"Message"`), ev(func(e *Event) { e.Counted = false })),
	ok("text escapes", ab(`,"text":"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00"`),
		ev(func(e *Event) { e.Text, e.HasText = "a\"b\\c/d\b\f\n\r\té😀", true })),
	ok("text empty", ab(`,"text":""`), ev(func(e *Event) { e.HasText = true })),
	ok("text lone surrogate", ab(`,"text":"x\ud800y\udc00\ud800\u0041"`),
		ev(func(e *Event) { e.Text, e.HasText = "x\uFFFDy\uFFFD\uFFFDA", true })),
	ok("text invalid UTF-8", ab("\x2c\"text\":\"a\xffb\xc3\""), ev(func(e *Event) { e.Text, e.HasText = "a\uFFFDb\uFFFD", true })),
	ok("text raw DEL and C1", ab("\x2c\"text\":\"\x7f\u0085\""), ev(func(e *Event) { e.Text, e.HasText = "\x7f\u0085", true })),
	ok("text number", ab(`,"text":12.5e3`), ev(nil)),
	ok("text null", ab(`,"text":null`), ev(nil)),
	ok("text object", ab(`,"text":{"a":["b"]}`), ev(nil)),
	ok("room escaped", `{"room":"lo\u0062by","user":"b"}`, ev(func(e *Event) { e.Room = "lobby" })),
	ok("room unicode", `{"room":"café","user":"🙂"}`, ev(func(e *Event) { e.Room, e.User = "café", "🙂" })),
	ok("room surrogate pair", `{"room":"\uD83D\uDE00","user":"b"}`, ev(func(e *Event) { e.Room = "😀" })),
	ok("room 128 bytes", `{"room":"`+strings.Repeat("é", 64)+`","user":"b"}`, ev(func(e *Event) { e.Room = strings.Repeat("é", 64) })),
	ok("room U+FFFD is fine", `{"room":"\ufffd�","user":"b"}`, ev(func(e *Event) { e.Room = "\uFFFD\uFFFD" })),
	ok("key escaped", `{"r\u006fom":"a","\u0075ser":"b"}`, ev(nil)),
	ok("other fields ignored", ab(`,"idx":"m-1","n":-1.5E+3,"t":true,"f":false,"z":null,"o":{"a":[1,{},[],""]},"e":[],"":""`), ev(nil)),
	ok("invalid UTF-8 in other fields", ab("\x2c\"i\xffd\":\"\xfe\""), ev(nil)),
	ok("Room is not room", `{"Room":"x","room":"a","user":"b","ROOM":"y"}`, ev(nil)),
	ok("depth 64", ab(`,"d":`+strings.Repeat("[", 63)+strings.Repeat("]", 63)), ev(nil)),
	ok("64 KiB", ab(`,"pad":"`+strings.Repeat("x", MaxPayload-len(ab(`,"pad":""`)))+`"`), ev(nil)),
	ok("id", ab(`,"id":"$dtXi6j:example.org"`), ev(func(e *Event) { e.ID = "$dtXi6j:example.org" })),
	ok("id escaped", ab(`,"id":"m\u002d1"`), ev(func(e *Event) { e.ID = "m-1" })),
	ok("id empty", ab(`,"id":""`), ev(nil)),
	ok("id null", ab(`,"id":null`), ev(nil)),
	ok("id number ignored", ab(`,"id":184467`), ev(nil)),
	ok("id object ignored", ab(`,"id":{"a":["b"]}`), ev(nil)),
	ok("id invalid UTF-8", ab("\x2c\"id\":\"a\xffb\""), ev(func(e *Event) { e.ID = "a\uFFFDb" })),
	ok("mentions", ab(`,"mentions":["carol","dave","carol"]`), ev(func(e *Event) { e.Mentions = []string{"carol", "dave", "carol"} })),
	ok("mentions escaped, with other elements skipped", ab(`,"mentions":[ "c\u0061rol" ,null,5,{"a":["b"]},[],"\ud800",""]`),
		ev(func(e *Event) { e.Mentions = []string{"carol", "\uFFFD", ""} })),
	ok("mentions empty", ab(`,"mentions":[]`), ev(nil)),
	ok("mentions null", ab(`,"mentions":null`), ev(nil)),
	ok("mentions not an array ignored", ab(`,"mentions":"carol"`), ev(nil)),
	ok("mentions object ignored", ab(`,"mentions":{"0":"carol"}`), ev(nil)),
	ok("mentions key escaped", ab(`,"m\u0065ntions":["carol"]`), ev(func(e *Event) { e.Mentions = []string{"carol"} })),

	// too_large
	bad("64 KiB + 1", ab(`,"pad":"`+strings.Repeat("x", MaxPayload+1-len(ab(`,"pad":""`)))+`"`),
		ReasonTooLarge, "payload is 65537 bytes, more than the limit of 65536"),

	// malformed
	bad("empty", ``, ReasonMalformed, "no JSON value in payload"),
	bad("whitespace", " \n", ReasonMalformed, "no JSON value in payload"),
	bad("array", `[{"room":"a","user":"b"}]`, ReasonMalformed, "payload must be a JSON object, got array"),
	bad("string", `"room"`, ReasonMalformed, "payload must be a JSON object, got string"),
	bad("null", `null`, ReasonMalformed, "payload must be a JSON object, got null"),
	bad("garbage", `hello`, ReasonMalformed, "syntax error at byte 0: invalid character 'h' looking for a value"),
	bad("BOM", "\xef\xbb\xbf{}", ReasonMalformed, "syntax error at byte 0: invalid byte 0xef looking for a value"),
	bad("truncated", `{"room":"a"`, ReasonMalformed, "syntax error at byte 11: unexpected end of input after object field value"),
	bad("truncated string", `{"room":"a`, ReasonMalformed, "syntax error at byte 10: unexpected end of input in string"),
	bad("truncated key", `{"ro`, ReasonMalformed, "syntax error at byte 4: unexpected end of input in string"),
	bad("no colon", `{"room" "a"}`, ReasonMalformed, "syntax error at byte 8: invalid character '\"' after object key"),
	bad("trailing data", ab(``)+` x`, ReasonMalformed, "syntax error at byte 24: data after the top-level object"),
	bad("two objects", ab(``)+`{}`, ReasonMalformed, "syntax error at byte 23: data after the top-level object"),
	bad("trailing comma", `{"room":"a",}`, ReasonMalformed, "syntax error at byte 12: invalid character '}' looking for an object key"),
	bad("single quotes", `{'room':'a'}`, ReasonMalformed, "syntax error at byte 1: invalid character '\\'' looking for an object key"),
	bad("room number", `{"room":5,"user":"b"}`, ReasonMalformed, "room: must be a string, got number"),
	bad("user bool", `{"room":"a","user":true}`, ReasonMalformed, "user: must be a string, got bool"),
	bad("room object", `{"room":{},"user":"b"}`, ReasonMalformed, "room: must be a string, got object"),
	bad("user array", `{"room":"a","user":["b"]}`, ReasonMalformed, "user: must be a string, got array"),
	bad("ts bool", ab(`,"ts":false`), ReasonMalformed, "ts: must be an RFC 3339 string or integer Unix milliseconds, got bool"),
	bad("ts object", ab(`,"ts":{}`), ReasonMalformed, "ts: must be an RFC 3339 string or integer Unix milliseconds, got object"),
	bad("ts array", ab(`,"ts":[1]`), ReasonMalformed, "ts: must be an RFC 3339 string or integer Unix milliseconds, got array"),
	bad("type number", ab(`,"type":1`), ReasonMalformed, "type: must be a string, got number"),
	bad("type bool", ab(`,"type":true`), ReasonMalformed, "type: must be a string, got bool"),
	bad("raw newline in string", ab(",\"text\":\"a\nb\""), ReasonMalformed, "syntax error at byte 32: control character 0x0a in string"),
	bad("raw NUL in room", "{\"room\":\"\x00\"}", ReasonMalformed, "syntax error at byte 9: control character 0x00 in string"),
	bad("bad escape", ab(`,"text":"\x41"`), ReasonMalformed, "syntax error at byte 32: invalid character 'x' in string escape"),
	bad("bad \\u escape", ab(`,"text":"\u12G4"`), ReasonMalformed, "syntax error at byte 35: invalid character 'G' in \\u escape"),
	bad("short \\u escape", ab(`,"text":"\u12"`), ReasonMalformed, "syntax error at byte 35: invalid character '\"' in \\u escape"),
	bad("leading zero", ab(`,"ts":0123`), ReasonMalformed, "syntax error at byte 29: invalid character '1' after object field value"),
	bad("bare decimal point", ab(`,"ts":1.`), ReasonMalformed, "syntax error at byte 30: invalid character '}' after decimal point in number"),
	bad("bare exponent", ab(`,"n":1e}`), ReasonMalformed, "syntax error at byte 29: invalid character '}' in exponent of number"),
	bad("plus sign", ab(`,"ts":+1`), ReasonMalformed, "syntax error at byte 28: invalid character '+' looking for a value"),
	bad("NaN", ab(`,"n":NaN`), ReasonMalformed, "syntax error at byte 27: invalid character 'N' looking for a value"),
	bad("bad literal", ab(`,"n":nul`), ReasonMalformed, "syntax error at byte 30: invalid character '}' in literal null"),
	bad("bad literal in ignored field", ab(`,"id":[tru]`), ReasonMalformed, "syntax error at byte 32: invalid character ']' in literal true"),
	bad("unclosed array", ab(`,"id":[1,2`), ReasonMalformed, "syntax error at byte 32: invalid character '}' after array element"),
	bad("array trailing comma", ab(`,"id":[1,]`), ReasonMalformed, "syntax error at byte 31: invalid character ']' looking for a value"),
	bad("object missing value", ab(`,"id":{"a"}`), ReasonMalformed, "syntax error at byte 32: invalid character '}' after object key"),
	bad("depth 65", ab(`,"d":`+strings.Repeat("[", 64)+strings.Repeat("]", 64)),
		ReasonMalformed, "nesting deeper than 64 levels at byte 90"),
	bad("deep bomb", `{"d":`+strings.Repeat(`{"a":[`, 10000),
		ReasonMalformed, "nesting deeper than 64 levels at byte 196"),
	bad("malformed beats invalid", `{"room":"","user":5}`, ReasonMalformed, "user: must be a string, got number"),
	bad("malformed beats invalid later in payload", `{"room":"","user":"b"}}`, ReasonMalformed, "syntax error at byte 22: data after the top-level object"),
	bad("malformed beats duplicate", `{"room":"a","room":1,"user":"b"}`, ReasonMalformed, "room: must be a string, got number"),

	// invalid
	bad("room missing", `{"user":"b"}`, ReasonInvalid, "room: missing"),
	bad("user missing", `{"room":"a"}`, ReasonInvalid, "user: missing"),
	bad("both missing", `{}`, ReasonInvalid, "room: missing"),
	bad("room null", `{"room":null,"user":"b"}`, ReasonInvalid, "room: missing"),
	bad("room empty", `{"room":"","user":"b"}`, ReasonInvalid, "room: must be 1..128 bytes, got 0"),
	bad("user 129 bytes", `{"room":"a","user":"`+strings.Repeat("u", 129)+`"}`, ReasonInvalid, "user: must be 1..128 bytes, got 129"),
	bad("room 130 bytes unicode", `{"room":"`+strings.Repeat("é", 65)+`","user":"b"}`, ReasonInvalid, "room: must be 1..128 bytes, got 130"),
	bad("room 129 bytes after unescaping", `{"room":"`+strings.Repeat(`\u00e9`, 64)+`x","user":"b"}`, ReasonInvalid, "room: must be 1..128 bytes, got 129"),
	bad("room escaped C0", `{"room":"a\u0007","user":"b"}`, ReasonInvalid, "room: must not contain control characters, got U+0007"),
	bad("room escaped newline", `{"room":"a\n","user":"b"}`, ReasonInvalid, "room: must not contain control characters, got U+000A"),
	bad("user raw DEL", "{\"room\":\"a\",\"user\":\"b\x7f\"}", ReasonInvalid, "user: must not contain control characters, got U+007F"),
	bad("user raw C1", "{\"room\":\"a\",\"user\":\"b\u0085\"}", ReasonInvalid, "user: must not contain control characters, got U+0085"),
	bad("room escaped C1", `{"room":"\u009F","user":"b"}`, ReasonInvalid, "room: must not contain control characters, got U+009F"),
	bad("room invalid UTF-8", "{\"room\":\"a\xff\",\"user\":\"b\"}", ReasonInvalid, "room: must be valid UTF-8"),
	bad("user truncated UTF-8", "{\"room\":\"a\",\"user\":\"\xc3\"}", ReasonInvalid, "user: must be valid UTF-8"),
	bad("room encoded surrogate", "{\"room\":\"\xed\xa0\x80\",\"user\":\"b\"}", ReasonInvalid, "room: must be valid UTF-8"),
	bad("room lone high surrogate", `{"room":"\ud800","user":"b"}`, ReasonInvalid, "room: must be valid UTF-8"),
	bad("room lone low surrogate", `{"room":"x\uDC00","user":"b"}`, ReasonInvalid, "room: must be valid UTF-8"),
	bad("room reversed surrogates", `{"room":"\udc00\ud800","user":"b"}`, ReasonInvalid, "room: must be valid UTF-8"),
	bad("UTF-8 checked before length", `{"room":"`+strings.Repeat("r", 200)+"\xff"+`","user":"b"}`, ReasonInvalid, "room: must be valid UTF-8"),
	bad("duplicate room", `{"room":"a","user":"b","room":"a"}`, ReasonInvalid, "room: duplicate key"),
	bad("duplicate escaped key", `{"room":"a","user":"b","\u0072oom":"c"}`, ReasonInvalid, "room: duplicate key"),
	bad("duplicate ts null", ab(`,"ts":null,"ts":1`), ReasonInvalid, "ts: duplicate key"),
	bad("duplicate mentions", ab(`,"mentions":[],"mentions":["a"]`), ReasonInvalid, "mentions: duplicate key"),
	bad("duplicate type", ab(`,"type":"join","type":"message"`), ReasonInvalid, "type: duplicate key"),
	bad("duplicate text", ab(`,"text":1,"text":"x"`), ReasonInvalid, "text: duplicate key"),
	bad("duplicate id", ab(`,"id":"a","id":"a"`), ReasonInvalid, "id: duplicate key"),
	bad("duplicate id of any type", ab(`,"id":1,"id":null`), ReasonInvalid, "id: duplicate key"),
	bad("duplicate other field is fine, user missing", `{"room":"a","n":1,"n":2}`, ReasonInvalid, "user: missing"),
	bad("join needs a user", `{"room":"a","type":"join"}`, ReasonInvalid, "user: missing"),
	bad("ts word", ab(`,"ts":"yesterday"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "yesterday"`),
	bad("ts empty", ab(`,"ts":""`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got ""`),
	bad("ts space separator", ab(`,"ts":"2026-11-30 07:00:00Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30 07:00:00Z"`),
	bad("ts lower-case t", ab(`,"ts":"2026-11-30t07:00:00Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30t07:00:00Z"`),
	bad("ts lower-case z", ab(`,"ts":"2026-11-30T07:00:00z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T07:00:00z"`),
	bad("ts no zone", ab(`,"ts":"2026-11-30T07:00:00"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T07:00:00"`),
	bad("ts date only", ab(`,"ts":"2026-11-30"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30"`),
	bad("ts empty fraction", ab(`,"ts":"2026-11-30T07:00:00.Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T07:00:00.Z"`),
	bad("ts comma fraction", ab(`,"ts":"2026-11-30T07:00:00,5Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T07:00:00,5Z"`),
	bad("ts one-digit hour", ab(`,"ts":"2026-11-30T7:00:00Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T7:00:00Z"`),
	bad("ts hour 24", ab(`,"ts":"2026-11-30T24:00:00Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T24:00:00Z"`),
	bad("ts leap second", ab(`,"ts":"2016-12-31T23:59:60Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2016-12-31T23:59:60Z"`),
	bad("ts Feb 29 of a common year", ab(`,"ts":"2026-02-29T00:00:00Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-02-29T00:00:00Z"`),
	bad("ts Feb 29 of 1900", ab(`,"ts":"1900-02-29T00:00:00Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "1900-02-29T00:00:00Z"`),
	bad("ts month 13", ab(`,"ts":"2026-13-01T00:00:00Z"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-13-01T00:00:00Z"`),
	bad("ts offset hour 24", ab(`,"ts":"2026-11-30T07:00:00+24:00"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T07:00:00+24:00"`),
	bad("ts offset minute 60", ab(`,"ts":"2026-11-30T07:00:00+01:60"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T07:00:00+01:60"`),
	bad("ts offset without colon", ab(`,"ts":"2026-11-30T07:00:00+0100"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "2026-11-30T07:00:00+0100"`),
	bad("ts with control char", ab(`,"ts":"\u0000"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "\x00"`),
	bad("ts long string is clipped", ab(`,"ts":"`+long+`"`), ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "`+long[:64]+`..."`),
	bad("ts before 1970", ab(`,"ts":"1969-12-31T23:59:59.999Z"`), ReasonInvalid, `ts: must be within years 1970..9999 UTC, got "1969-12-31T23:59:59.999Z"`),
	bad("ts before 1970 by offset", ab(`,"ts":"1970-01-01T00:30:00+01:00"`), ReasonInvalid, `ts: must be within years 1970..9999 UTC, got "1970-01-01T00:30:00+01:00"`),
	bad("ts year 0", ab(`,"ts":"0000-01-01T00:00:00Z"`), ReasonInvalid, `ts: must be within years 1970..9999 UTC, got "0000-01-01T00:00:00Z"`),
	bad("ts after 9999 by offset", ab(`,"ts":"9999-12-31T23:59:59-01:00"`), ReasonInvalid, `ts: must be within years 1970..9999 UTC, got "9999-12-31T23:59:59-01:00"`),
	bad("ts fraction", ab(`,"ts":1.5`), ReasonInvalid, "ts: must be integer Unix milliseconds, got 1.5"),
	bad("ts .0", ab(`,"ts":1796022000000.0`), ReasonInvalid, "ts: must be integer Unix milliseconds, got 1796022000000.0"),
	bad("ts exponent", ab(`,"ts":1e3`), ReasonInvalid, "ts: must be integer Unix milliseconds, got 1e3"),
	bad("ts negative", ab(`,"ts":-5`), ReasonInvalid, "ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got -5"),
	bad("ts past 9999", ab(`,"ts":253402300800000`), ReasonInvalid, "ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got 253402300800000"),
	bad("ts beyond int64", ab(`,"ts":99999999999999999999`), ReasonInvalid, "ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got 99999999999999999999"),
	bad("ts long number is clipped", ab(`,"ts":`+strings.Repeat("9", 100)), ReasonInvalid,
		"ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got "+strings.Repeat("9", 64)+"..."),
	bad("first invalid in payload order", `{"ts":"x","room":"","user":"b"}`, ReasonInvalid, `ts: must be an RFC 3339 timestamp, got "x"`),
	bad("first invalid in payload order 2", `{"room":"","ts":"x","user":"b"}`, ReasonInvalid, "room: must be 1..128 bytes, got 0"),
	bad("missing comes after other invalid fields", `{"ts":-1,"user":"b"}`, ReasonInvalid, "ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got -1"),
	bad("invalid beats future", `{"room":"","user":"b","ts":"2027-01-01T00:00:00Z"}`, ReasonInvalid, "room: must be 1..128 bytes, got 0"),

	// future
	bad("future by 1 ms", ab(`,"ts":"2026-11-30T07:00:05.001Z"`), ReasonFuture,
		"ts: 2026-11-30T07:00:05.001Z is 5.001s ahead of the clock, more than the allowed skew of 5s"),
	bad("future integer", ab(`,"ts":1796022010000`), ReasonFuture,
		"ts: 2026-11-30T07:00:10.000Z is 10s ahead of the clock, more than the allowed skew of 5s"),
	bad("future by offset", ab(`,"ts":"2026-11-30T07:00:00-01:00"`), ReasonFuture,
		"ts: 2026-11-30T08:00:00.000Z is 1h0m0s ahead of the clock, more than the allowed skew of 5s"),
	bad("future year 9999", ab(`,"ts":253402300799999`), ReasonFuture,
		"ts: 9999-12-31T23:59:59.999Z is 251606278799999ms ahead of the clock, more than the allowed skew of 5s"),
}

func TestDecode(t *testing.T) {
	for _, c := range decodeCases {
		t.Run(c.name, func(t *testing.T) {
			now := testNow
			if c.now != 0 {
				now = c.now
			}
			got, err := Decode([]byte(c.in), now, testSkew)
			if c.rsn == "" {
				if err != nil {
					t.Fatalf("Decode(%s) = %v, want %+v", show([]byte(c.in)), err, c.want)
				}
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("Decode(%s) =\n %+v, want\n %+v", show([]byte(c.in)), got, c.want)
				}
			} else {
				e, isErr := err.(*Error)
				if !isErr {
					t.Fatalf("Decode(%s) = %+v, %v; want %s %q", show([]byte(c.in)), got, err, c.rsn, c.msg)
				}
				if e.Reason != c.rsn || e.Msg != c.msg {
					t.Fatalf("Decode(%s): got %s %q, want %s %q", show([]byte(c.in)), e.Reason, e.Msg, c.rsn, c.msg)
				}
				if !reflect.DeepEqual(got, Event{}) {
					t.Fatalf("Decode(%s) returned %+v with its error", show([]byte(c.in)), got)
				}
			}
			checkAgainstReference(t, []byte(c.in), now, testSkew)
		})
	}
}

func TestErrorString(t *testing.T) {
	_, err := Decode([]byte(`{"room":"","user":"b"}`), testNow, testSkew)
	if got, want := err.Error(), "invalid: room: must be 1..128 bytes, got 0"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := fmt.Sprint(Reasons()); got != "[malformed invalid too_large late future subject_mismatch unmapped]" {
		t.Fatalf("Reasons() = %s", got)
	}
}

// Typical events, with nothing to unescape, decode without allocating.
func TestDecodeAllocs(t *testing.T) {
	for _, in := range benchEvents {
		if in.escapes {
			continue
		}
		data := []byte(in.json)
		if allocs := testing.AllocsPerRun(100, func() {
			if _, err := Decode(data, testNow, testSkew); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("%s: %v allocations per Decode, want 0", in.name, allocs)
		}
	}
}

// Room, User and Text alias the payload when they hold no escapes and copy
// it when they do.
func TestDecodeAliases(t *testing.T) {
	data := []byte(`{"room":"lobby","user":"al\u0069ce","text":"hi"}`)
	got, err := Decode(data, testNow, testSkew)
	if err != nil {
		t.Fatal(err)
	}
	inData := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		base := uintptr(unsafe.Pointer(&data[0]))
		return p >= base && p < base+uintptr(len(data))
	}
	if !inData(got.Room) || !inData(got.Text) {
		t.Errorf("room and text should alias the payload")
	}
	if got.User != "alice" || inData(got.User) {
		t.Errorf("user %q should be an unescaped copy", got.User)
	}
}

// The fast decoder agrees with the reference on random payloads built
// from good and bad parts, and on mutations of them.
func TestDecodeAgreesWithReference(t *testing.T) {
	n := 60000
	if testing.Short() {
		n = 5000
	}
	r := rand.New(rand.NewPCG(1, 2))
	reasons := map[Reason]int{}
	for range n {
		data := genPayload(r)
		_, err := Decode(data, testNow, testSkew)
		if err != nil {
			reasons[err.(*Error).Reason]++
		} else {
			reasons["accepted"]++
		}
		checkAgainstReference(t, data, testNow, testSkew)
		if t.Failed() {
			return
		}
	}
	// The generator must exercise every outcome, or the test proves little.
	for _, want := range []Reason{"accepted", ReasonMalformed, ReasonInvalid, ReasonTooLarge, ReasonFuture} {
		if reasons[want] < n/1000 {
			t.Errorf("only %d of %d payloads came out %s: %v", reasons[want], n, want, reasons)
		}
	}
	t.Logf("outcomes: %v", reasons)
}

// checkAgainstReference decodes data with Decode and refDecode and fails t
// unless they agree: the same reason, the same message unless malformed
// (where encoding/json words syntax errors its own way), the same Event.
// An accepted event is also checked against the contract directly.
func checkAgainstReference(t *testing.T, data []byte, now, skew int64) {
	t.Helper()
	got, err := Decode(data, now, skew)
	want, werr := refDecode(data, now, skew)
	var gerr *Error
	if err != nil {
		var isErr bool
		if gerr, isErr = err.(*Error); !isErr || gerr == nil {
			t.Fatalf("Decode(%s): error %v is not an *Error", show(data), err)
		}
	}
	switch {
	case gerr == nil && werr == nil:
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(%s) =\n %+v, reference\n %+v", show(data), got, want)
		}
		checkContract(t, data, got, now, skew)
	case gerr == nil || werr == nil:
		t.Fatalf("Decode(%s) = %+v, %v; reference %+v, %v", show(data), got, gerr, want, werr)
	case gerr.Reason != werr.Reason:
		t.Fatalf("Decode(%s): %v; reference %v", show(data), gerr, werr)
	case gerr.Reason != ReasonMalformed && gerr.Msg != werr.Msg:
		t.Fatalf("Decode(%s): %v; reference %v", show(data), gerr, werr)
	}
}

// checkContract fails t unless ev, accepted from data, obeys contract
// section 1, checked without either decoder.
func checkContract(t *testing.T, data []byte, ev Event, now, skew int64) {
	t.Helper()
	if len(data) > MaxPayload || !json.Valid(data) || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
		t.Fatalf("accepted a payload that is not one JSON object of at most 64 KiB: %s", show(data))
	}
	for _, s := range []string{ev.Room, ev.User} {
		if len(s) < 1 || len(s) > chat.MaxNameLen || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
			t.Fatalf("accepted bad room or user %q in %s", s, show(data))
		}
	}
	if !utf8.ValidString(ev.Text) || !ev.HasText && ev.Text != "" {
		t.Fatalf("accepted bad text %q in %s", ev.Text, show(data))
	}
	if ev.TS > now+skew || ev.TS != now && (ev.TS < MinTS || ev.TS > MaxTS) {
		t.Fatalf("accepted ts %d in %s", ev.TS, show(data))
	}
}
