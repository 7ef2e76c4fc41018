package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
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
		Event{Event: chat.Event{Room: "lobby", User: "alice", TS: ms("2026-11-30T07:00:00.123Z"), Text: "hi"}, HasText: true, Counted: true}),
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
	ok("type join ignored", ab(`,"type":"join"`), ev(func(e *Event) { e.Counted = false })),
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
	ok("other fields ignored", ab(`,"id":"m-1","n":-1.5E+3,"t":true,"f":false,"z":null,"o":{"a":[1,{},[],""]},"e":[],"":""`), ev(nil)),
	ok("invalid UTF-8 in other fields", ab("\x2c\"i\xffd\":\"\xfe\""), ev(nil)),
	ok("Room is not room", `{"Room":"x","room":"a","user":"b","ROOM":"y"}`, ev(nil)),
	ok("depth 64", ab(`,"d":`+strings.Repeat("[", 63)+strings.Repeat("]", 63)), ev(nil)),
	ok("64 KiB", ab(`,"id":"`+strings.Repeat("x", MaxPayload-len(ab(`,"id":""`)))+`"`), ev(nil)),

	// too_large
	bad("64 KiB + 1", ab(`,"id":"`+strings.Repeat("x", MaxPayload+1-len(ab(`,"id":""`)))+`"`),
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
	bad("duplicate type", ab(`,"type":"join","type":"message"`), ReasonInvalid, "type: duplicate key"),
	bad("duplicate text", ab(`,"text":1,"text":"x"`), ReasonInvalid, "text: duplicate key"),
	bad("duplicate other field is fine, user missing", `{"room":"a","id":1,"id":2}`, ReasonInvalid, "user: missing"),
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
				if got != c.want {
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
				if got != (Event{}) {
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
	if got := fmt.Sprint(Reasons()); got != "[malformed invalid too_large late future]" {
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

// parseRFC3339 agrees with the reference's time.Parse (made strict) on
// random instants of years 0..9999, in random zones and precisions.
func TestParseRFC3339(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	lo, hi := ms("0000-01-01T00:00:00Z"), ms("9999-12-31T23:59:59.999999999Z")
	for range 100000 {
		s := randomTimestamp(r, lo+r.Int64N(hi-lo))
		want, wantOK := refParseTime(s)
		got, ok := parseRFC3339(s)
		if ok != wantOK || ok && got != want.UnixMilli() {
			t.Fatalf("parseRFC3339(%q) = %d, %v; reference: %d, %v", s, got, ok, want.UnixMilli(), wantOK)
		}
	}
}

// randomTimestamp writes the instant ms (plus sub-ms noise) in RFC 3339
// with 0..12 fraction digits and a random zone.
func randomTimestamp(r *rand.Rand, ms int64) string {
	t := time.UnixMilli(ms).Add(time.Duration(r.IntN(1e6))).UTC()
	if r.IntN(3) > 0 {
		off := (r.IntN(48*60) - 24*60 + 1) * 60
		t = t.In(time.FixedZone("", off))
	}
	s := t.Format("2006-01-02T15:04:05Z07:00")
	if n := r.IntN(13); n > 0 {
		frac := fmt.Sprintf("%09d000", t.Nanosecond())[:n]
		s = s[:19] + "." + frac + s[19:]
	}
	return s
}

// The special SWAR test finds exactly the bytes a string scan must stop at.
func TestSpecial(t *testing.T) {
	stop := func(c byte) bool { return c < 0x20 || c == '"' || c == '\\' || c >= 0x7f }
	for c := range 256 {
		for pos := range 8 {
			w := uint64(0x6161616161616161)
			w = w&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			if got := special(w); got != stop(byte(c)) {
				t.Fatalf("special(%#x) = %v", w, got)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		w := r.Uint64()
		want := false
		for k := range 8 {
			want = want || stop(byte(w>>(8*k)))
		}
		if special(w) != want {
			t.Fatalf("special(%#x) = %v", w, !want)
		}
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
		if got != want {
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
		case "room", "user", "ts", "type", "text":
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
				ev.Counted = true
			case "string":
				ev.Counted = s == "message"
			default:
				return malformed("type: must be a string, got " + kind)
			}
		case "text":
			ev.Text, ev.HasText = s, kind == "string"
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

// genPayload builds a random payload in random field order and spacing.
// Half are clean: good parts only, so most of them are accepted (unless ts
// is too far ahead). The others draw from good and bad parts alike, and a
// third of those are then mutated.
func genPayload(r *rand.Rand) []byte {
	g := gen{r: r, clean: r.IntN(2) == 0}
	type field struct{ key, val string }
	var fields []field
	add := func(p float64, keys []string, val func() string) {
		if r.Float64() < p {
			fields = append(fields, field{g.pick(keys), val()})
		}
	}
	name := func() string { return g.pick(genGoodNames, genBadNames) }
	add(0.95, []string{`"room"`, `"room"`, `"room"`, `"r\u006fom"`, `"Room"`}, name)
	add(0.95, []string{`"user"`, `"user"`, `"user"`, `"\u0075ser"`, `"USER"`}, name)
	add(0.7, []string{`"ts"`, `"ts"`, `"ts"`, `"t\u0073"`}, g.ts)
	add(0.3, []string{`"type"`}, func() string { return g.pick(genGoodTypes, genBadTypes) })
	add(0.7, []string{`"text"`}, func() string {
		if r.IntN(4) == 0 {
			return g.value(0)
		}
		return g.pick(genGoodTexts, genBadTexts)
	})
	add(0.7, []string{`"id"`}, func() string { return fmt.Sprintf(`"m-%d"`, r.IntN(1e6)) })
	for range r.IntN(3) {
		add(1, []string{`"x"`, `""`, `"meta"`, `"\u00e9"`, "\"k\xff\""}, func() string { return g.value(0) })
	}
	if !g.clean && len(fields) > 0 && r.IntN(10) == 0 {
		fields = append(fields, fields[r.IntN(len(fields))])
	}
	if r.IntN(200) == 0 {
		pad := MaxPayload - 50 + r.IntN(100)
		if g.clean {
			pad = 60000
		}
		fields = append(fields, field{`"pad"`, `"` + strings.Repeat("p", pad) + `"`})
	}
	r.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	ws := func() string {
		if r.IntN(4) > 0 {
			return ""
		}
		return pick(r, []string{" ", "\n", "\t", "\r\n  "})
	}
	var b strings.Builder
	b.WriteString(ws() + "{")
	for i, f := range fields {
		if i > 0 {
			b.WriteString(ws() + ",")
		}
		b.WriteString(ws() + f.key + ws() + ":" + ws() + f.val + ws())
	}
	b.WriteString("}" + ws())
	data := []byte(b.String())
	if !g.clean && r.IntN(3) == 0 {
		data = mutate(r, data)
	}
	return data
}

var (
	genGoodNames = []string{`"lobby"`, `"a"`, `"support-eu"`, `"café"`, `"lo\u0062by"`, `"\ud83d\ude00"`, `"😀"`,
		`"` + strings.Repeat("r", 128) + `"`, `"` + strings.Repeat("é", 64) + `"`, `"a\\b\/c\"d"`, `"\uFFFD"`}
	genBadNames = []string{`""`, `"` + strings.Repeat("r", 129) + `"`, `"` + strings.Repeat("é", 65) + `"`,
		`"` + strings.Repeat(`\u00e9`, 64) + `x"`, `"a\u0007"`, `"\t"`, "\"a\x7f\"", `"\u0085"`, "\"\u0085\"", "\"\xff\"",
		"\"a\xc3\"", "\"\xed\xa0\x80\"", `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\ud800\ud800"`, `null`, `5`, `true`,
		`{}`, `["a"]`, "\"a\tb\"", `"\u00"`, `"\q"`}
	genGoodTypes = []string{`"message"`, `"join"`, `""`, `"Message"`, `"messag\u0065"`, `null`, `"\ud800"`}
	genBadTypes  = []string{`1`, `[]`, `true`, `{}`}
	genGoodTexts = []string{`"hi there, how is everyone doing today?"`, `""`, `"a\nb\u00e9\ud83d\ude00"`, `"x\ud800y"`,
		"\"a\xffb\"", "\"\x7f\u0085\"", `null`, `12.5`, `{"a":[1]}`, `"\"quoted\" \\ \/ \b\f\r\t"`}
	genBadTexts = []string{"\"raw\nnewline\"", `"\x"`, `"\u12"`, `"unterminated`, `'single'`}
)

// gen draws the parts of one payload: good ones only when clean, else good
// and bad alike.
type gen struct {
	r     *rand.Rand
	clean bool
}

func (g gen) pick(good []string, bad ...[]string) string {
	if !g.clean && len(bad) > 0 && g.r.IntN(2) == 0 {
		return pick(g.r, bad[0])
	}
	return pick(g.r, good)
}

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

// ts returns a ts value: valid RFC 3339 strings and integers around now,
// at the range ends or anywhere, and unless clean, broken variants.
func (g gen) ts() string {
	r := g.r
	var at int64
	switch r.IntN(5) {
	case 0, 1:
		at = testNow + r.Int64N(20000) - 10000
	case 2:
		at = r.Int64N(MaxTS)
	case 3:
		at = []int64{MinTS, MaxTS}[r.IntN(2)] + r.Int64N(2000) - 1000
	default:
		at = r.Int64N(2*MaxTS) - MaxTS/2
	}
	if g.clean {
		at = min(max(at, MinTS), testNow+2*testSkew)
	}
	switch k := r.IntN(12); {
	case k == 0:
		return strconv.FormatInt(at, 10)
	case k == 1 && g.clean:
		return `null`
	case k == 1:
		return strconv.FormatInt(at, 10) + pick(r, []string{".0", ".5", "e0", "E+2", "e-1"})
	case g.clean:
	case k == 2:
		return pick(r, []string{`null`, `true`, `{}`, `[1]`, `"yesterday"`, `""`, `-0`, `99999999999999999999`, `01`})
	case k == 3:
		// Corrupt one character of a valid timestamp.
		s := []byte(randomTimestamp(r, at))
		s[r.IntN(len(s))] = pick(r, []string{"0", "9", "3", "6", "2", "-", ":", "T", "t", "Z", "z", "+", ".", ",", " "})[0]
		return strconv.Quote(string(s))
	case k == 4:
		return `"` + pick(r, []string{"2026-02-29T00:00:00Z", "2024-02-29T12:00:00Z", "1900-02-29T00:00:00Z",
			"2000-02-29T00:00:00Z", "2026-11-30T24:00:00Z", "2016-12-31T23:59:60Z", "2026-11-30T07:00:00+24:00",
			"2026-11-30T07:00:00+23:59", "2026-11-30T07:00:00-00:60", "2026-11-30T7:00:00Z", "2026-11-30T07:00:00,5Z",
			"2026-11-30T07:00:00\\u002e5Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z"}) + `"`
	}
	s := randomTimestamp(r, at)
	if g.clean && (s < "1970" || s > "9999") {
		return strconv.FormatInt(at, 10) // an offset moved it out of range
	}
	return `"` + s + `"`
}

// value returns a random JSON value for ignored fields, unless clean
// sometimes nested past MaxDepth or broken.
func (g gen) value(depth int) string {
	r := g.r
	switch r.IntN(10) {
	case 0:
		if r.IntN(30) == 0 {
			n := MaxDepth - 4 + r.IntN(8)
			if g.clean {
				n = MaxDepth - 2
			}
			return strings.Repeat("[", n) + strings.Repeat("]", n)
		}
		fallthrough
	case 1:
		if depth > 4 {
			return "[]"
		}
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, g.value(depth+1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case 2:
		if depth > 4 {
			return "{}"
		}
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, fmt.Sprintf(`"k%d":%s`, r.IntN(3), g.value(depth+1)))
		}
		return "{" + strings.Join(parts, ",") + "}"
	case 3:
		return g.pick([]string{"0", "-1", "1.5", "-0.0e-7", "1E+400", "123456789012345678901234567890"},
			[]string{"-", "1.", ".5", "1e", "0x1F", "+1", "00"})
	case 4:
		return g.pick([]string{"true", "false", "null"}, []string{"tru", "nul", "True"})
	default:
		return g.pick(genGoodTexts, genBadTexts)
	}
}

// mutate changes one to four bytes of data, or cuts it short.
func mutate(r *rand.Rand, data []byte) []byte {
	data = bytes.Clone(data)
	const alphabet = "{}[],:\"\\ 09-.eEtfnul\x00\x1f\x7f\x80\xc3\xff"
	for range 1 + r.IntN(4) {
		if len(data) == 0 {
			return data
		}
		i := r.IntN(len(data))
		switch r.IntN(5) {
		case 0:
			data[i] = alphabet[r.IntN(len(alphabet))]
		case 1:
			data = append(data[:i], data[i+1:]...)
		case 2:
			data = append(data[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, data[i:]...)...)
		case 3:
			data = data[:i]
		default:
			j := i + r.IntN(len(data)-i)
			data = append(data[:j], append(bytes.Clone(data[i:j]), data[j:]...)...)
		}
	}
	return data
}
