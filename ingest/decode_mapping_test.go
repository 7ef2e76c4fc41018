package ingest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

// matrixNow is the clock of the Matrix tests: a little after the samples
// were taken.
const matrixNow = 1796156000000

// sample reads a Matrix sample payload.
func sample(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "matrix", name+".payload.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// samples are every Matrix sample payload, by name.
func samples(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "matrix", "*.payload.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".payload.json")
		out[name] = sample(t, name)
	}
	return out
}

// TestMatrixSamples decodes each event a real Dendrite published, and
// checks it against what it was: the kind, and the fields as
// encoding/json reads them from the event.
func TestMatrixSamples(t *testing.T) {
	want := map[string]chat.Kind{ // the counted ones; every other sample is ignored
		"009-join":                      chat.KindJoin,
		"011-message":                   chat.KindMessage,
		"016-message-later-redacted":    chat.KindMessage, // a redacted message stays counted
		"018-reply-m.in_reply_to":       chat.KindMessage,
		"022-member-displayname-change": chat.KindJoin, // see matrixKind: only membership state tells
		"023-leave":                     chat.KindLeave,
		"034-join-after-invite":         chat.KindJoin,
		"037-message-burst":             chat.KindMessage,
		"1279-message-special-chars":    chat.KindMessage,
	}
	for name, data := range samples(t) {
		t.Run(name, func(t *testing.T) {
			got, err := Matrix().Decode(data, matrixNow, testSkew)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			kind, counted := want[name]
			if got.Counted != counted {
				t.Fatalf("Counted = %v, want %v (%+v)", got.Counted, counted, got)
			}
			if !counted {
				if !reflect.DeepEqual(got, Event{}) {
					t.Fatalf("an ignored event decodes to the zero Event, got %+v", got)
				}
				return
			}
			var env struct {
				Event struct {
					RoomID, Sender, StateKey, EventID string
					TS                                int64
					Content                           struct{ Body *string }
				}
			}
			raw := dendriteEvent(t, data)
			fields := map[string]any{"room_id": &env.Event.RoomID, "sender": &env.Event.Sender, "state_key": &env.Event.StateKey,
				"_event_id": &env.Event.EventID, "origin_server_ts": &env.Event.TS, "content": &env.Event.Content}
			for k, v := range fields {
				if r, ok := raw[k]; ok {
					if err := json.Unmarshal(r, v); err != nil {
						t.Fatal(err)
					}
				}
			}
			e := env.Event
			user := e.Sender
			if kind != chat.KindMessage {
				user = e.StateKey
			}
			w := Event{Event: chat.Event{Room: e.RoomID, User: user, TS: e.TS, ID: e.EventID, Kind: kind}, Counted: true}
			if e.Content.Body != nil {
				w.Text, w.HasText = *e.Content.Body, true
			}
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("Decode =\n %+v, want\n %+v", got, w)
			}
			checkMappedAgainstReference(t, matrixMapping, Matrix(), data, matrixNow)
		})
	}
}

// matrixEvent is a Matrix envelope written by hand, with the fields that
// count and the noise a real one has.
func matrixEvent(evType, rest string) string {
	return `{"type":"new_room_event","new_room_event":{"event":{"auth_events":["$a","$b"],"content":{"body":"hi","msgtype":"m.text"},` +
		`"depth":11,"hashes":{"sha256":"x"},"origin_server_ts":1796155481077,"room_id":"!r:example.org","sender":"@a:example.org",` +
		`"type":"` + evType + `"` + rest + `,"_event_id":"$e1"},"latest_event_ids":["$e1"],"send_as_server":"example.org"}}`
}

var matrixEv = Event{Event: chat.Event{Room: "!r:example.org", User: "@a:example.org", TS: 1796155481077, Text: "hi", ID: "$e1"}, HasText: true, Counted: true}

func matrixOK(mod func(*Event)) Event {
	e := matrixEv
	if mod != nil {
		mod(&e)
	}
	return e
}

var matrixCases = []decodeCase{
	ok("message", matrixEvent("m.room.message", ""), matrixOK(nil)),
	ok("edit is not a message", strings.Replace(matrixEvent("m.room.message", ""), `"msgtype":"m.text"`,
		`"msgtype":"m.text","m.relates_to":{"rel_type":"m.replace","event_id":"$e0"}`, 1), Event{}),
	ok("reply is a message", strings.Replace(matrixEvent("m.room.message", ""), `"msgtype":"m.text"`,
		`"msgtype":"m.text","m.relates_to":{"m.in_reply_to":{"event_id":"$e0"}}`, 1), matrixOK(nil)),
	ok("thread reply is a message", strings.Replace(matrixEvent("m.room.message", ""), `"msgtype":"m.text"`,
		`"msgtype":"m.text","m.relates_to":{"rel_type":"m.thread","event_id":"$e0"}`, 1), matrixOK(nil)),
	ok("message as a state event is not a message", matrixEvent("m.room.message", `,"state_key":""`), Event{}),
	ok("join", strings.Replace(matrixEvent("m.room.member", `,"state_key":"@a:example.org"`), `"body":"hi","msgtype":"m.text"`, `"membership":"join"`, 1),
		matrixOK(func(e *Event) { e.Kind, e.Text, e.HasText = chat.KindJoin, "", false })),
	ok("kick is a leave of the kicked", strings.Replace(matrixEvent("m.room.member", `,"state_key":"@spam:example.org"`), `"body":"hi","msgtype":"m.text"`, `"membership":"leave","reason":"spam"`, 1),
		matrixOK(func(e *Event) { e.Kind, e.User, e.Text, e.HasText = chat.KindLeave, "@spam:example.org", "", false })),
	ok("ban is ignored", strings.Replace(matrixEvent("m.room.member", `,"state_key":"@spam:example.org"`), `"body":"hi","msgtype":"m.text"`, `"membership":"ban"`, 1), Event{}),
	ok("reaction is ignored", matrixEvent("m.reaction", ""), Event{}),
	ok("redaction is ignored", matrixEvent("m.room.redaction", `,"redacts":"$e0"`), Event{}),
	ok("other envelope ignored", strings.Replace(matrixEvent("m.room.message", ""), `"type":"new_room_event"`, `"type":"redacted_event"`, 1), Event{}),
	ok("no envelope type ignored", strings.Replace(matrixEvent("m.room.message", ""), `"type":"new_room_event",`, ``, 1), Event{}),
	ok("ignored events are not read further", `{"type":"retire_invite_event","retire_invite_event":{"RoomID":5}}`, Event{}),
	ok("event_id when there is no _event_id", strings.Replace(matrixEvent("m.room.message", ""), `"_event_id"`, `"event_id"`, 1), matrixOK(nil)),
	ok("_event_id first", strings.Replace(matrixEvent("m.room.message", ""), `"_event_id":"$e1"`, `"event_id":"$e0","_event_id":"$e1"`, 1), matrixOK(nil)),
	ok("no body", strings.Replace(matrixEvent("m.room.message", ""), `"body":"hi",`, ``, 1), matrixOK(func(e *Event) { e.Text, e.HasText = "", false })),
	ok("escaped body and ids", strings.Replace(strings.Replace(matrixEvent("m.room.message", ""), `"body":"hi"`, `"body":"\u003cb\u003e"`, 1), `"room_id"`, `"room\u005fid"`, 1),
		matrixOK(func(e *Event) { e.Text = "<b>" })),
	ok("mentions", strings.Replace(matrixEvent("m.room.message", ""), `"msgtype":"m.text"`,
		`"msgtype":"m.text","m.mentions":{"user_ids":["@b:x","@c:x","@b:x",5]}`, 1), matrixOK(func(e *Event) { e.Mentions = []string{"@b:x", "@c:x", "@b:x"} })),
	ok("room mention", strings.Replace(matrixEvent("m.room.message", ""), `"msgtype":"m.text"`,
		`"msgtype":"m.text","m.mentions":{"room":true}`, 1), matrixOK(func(e *Event) { e.Mentions = []string{"@room"} })),
	ok("room mention beside a user named @room", strings.Replace(matrixEvent("m.room.message", ""), `"msgtype":"m.text"`,
		`"msgtype":"m.text","m.mentions":{"user_ids":["@room","@room 2"],"room":true}`, 1), matrixOK(func(e *Event) { e.Mentions = []string{"@room", "@room 2", "@room 3"} })),
	ok("room false is none", strings.Replace(matrixEvent("m.room.message", ""), `"msgtype":"m.text"`,
		`"msgtype":"m.text","m.mentions":{"user_ids":[],"room":false}`, 1), matrixOK(nil)),
	ok("mentions in the body are not mentions", strings.Replace(matrixEvent("m.room.message", ""), `"body":"hi"`, `"body":"hi @b:x"`, 1),
		matrixOK(func(e *Event) { e.Text = "hi @b:x" })),
	ok("255-byte user", strings.Replace(matrixEvent("m.room.message", ""), `"@a:example.org"`, `"@`+strings.Repeat("a", 242)+`:example.org"`, 1),
		matrixOK(func(e *Event) { e.User = "@" + strings.Repeat("a", 242) + ":example.org" })),

	bad("256-byte user", strings.Replace(matrixEvent("m.room.message", ""), `"@a:example.org"`, `"@`+strings.Repeat("a", 243)+`:example.org"`, 1),
		ReasonInvalid, "user: /new_room_event/event/sender: must be 1..255 bytes, got 256"),
	bad("no room", strings.Replace(matrixEvent("m.room.message", ""), `"room_id":"!r:example.org",`, ``, 1),
		ReasonUnmapped, "room: no value at /new_room_event/event/room_id"),
	bad("null room", strings.Replace(matrixEvent("m.room.message", ""), `"!r:example.org"`, `null`, 1),
		ReasonUnmapped, "room: no value at /new_room_event/event/room_id"),
	bad("room an object", strings.Replace(matrixEvent("m.room.message", ""), `"!r:example.org"`, `{"id":"!r"}`, 1),
		ReasonUnmapped, "room: /new_room_event/event/room_id: must be a string or an integer, got object"),
	bad("room with a control character", strings.Replace(matrixEvent("m.room.message", ""), `"!r:example.org"`, `"!r\n:example.org"`, 1),
		ReasonInvalid, "room: /new_room_event/event/room_id: must not contain control characters, got U+000A"),
	bad("join without state_key", strings.Replace(matrixEvent("m.room.member", ``), `"body":"hi","msgtype":"m.text"`, `"membership":"join"`, 1),
		ReasonUnmapped, "user: no value at /new_room_event/event/state_key"),
	bad("no ts", strings.Replace(matrixEvent("m.room.message", ""), `"origin_server_ts":1796155481077,`, ``, 1),
		ReasonUnmapped, "ts: no value at /new_room_event/event/origin_server_ts"),
	bad("ts a fraction", strings.Replace(matrixEvent("m.room.message", ""), `1796155481077`, `1796155481077.5`, 1),
		ReasonUnmapped, "ts: /new_room_event/event/origin_server_ts: must be integer Unix milliseconds, got 1796155481077.5"),
	bad("ts RFC 3339", strings.Replace(matrixEvent("m.room.message", ""), `1796155481077`, `"2026-12-01T10:44:41Z"`, 1),
		ReasonUnmapped, `ts: /new_room_event/event/origin_server_ts: must be integer Unix milliseconds, got "2026-12-01T10:44:41Z"`),
	bad("ts negative", strings.Replace(matrixEvent("m.room.message", ""), `1796155481077`, `-1`, 1),
		ReasonInvalid, "ts: /new_room_event/event/origin_server_ts: must be 0..253402300799999 (Unix ms, years 1970..9999), got -1"),
	bad("ts ahead", strings.Replace(matrixEvent("m.room.message", ""), `1796155481077`, `1796156010000`, 1),
		ReasonFuture, "ts: 2026-12-01T20:13:30.000Z is 10s ahead of the clock, more than the allowed skew of 5s"),
	bad("sender twice", strings.Replace(matrixEvent("m.room.message", ""), `"sender":"@a:example.org"`, `"sender":"@b:example.org","sender":"@a:example.org"`, 1),
		ReasonInvalid, "/new_room_event/event/sender: duplicate key"),
	bad("content twice", strings.Replace(matrixEvent("m.room.message", ""), `"depth":11`, `"content":{},"depth":11`, 1),
		ReasonInvalid, "/new_room_event/event/content: duplicate key"),
	ok("a key twice off the pointers' way is fine", strings.Replace(matrixEvent("m.room.message", ""), `"depth":11`, `"depth":11,"depth":12`, 1), matrixOK(nil)),
	bad("malformed", matrixEvent("m.room.message", "")+"x", ReasonMalformed, "syntax error at byte 344: data after the top-level object"),
	bad("malformed in what is skipped", strings.Replace(matrixEvent("m.room.message", ""), `"depth":11`, `"depth":1.`, 1),
		ReasonMalformed, "syntax error at byte 131: invalid character ',' after decimal point in number"),
	bad("not an object", `["new_room_event"]`, ReasonMalformed, "payload must be a JSON object, got array"),
	bad("deep", strings.Replace(matrixEvent("m.room.message", ""), `"depth":11`, `"d":`+strings.Repeat("[", 62)+strings.Repeat("]", 62), 1),
		ReasonMalformed, "nesting deeper than 64 levels at byte 186"),
	bad("1 MiB + 1", strings.Replace(matrixEvent("m.room.message", ""), `"hi"`, `"`+strings.Repeat("x", MaxMatrixPayload+1-len(matrixEvent("m.room.message", "")))+`hi"`, 1),
		ReasonTooLarge, "payload is 1048577 bytes, more than the limit of 1048576"),
}

func TestDecodeMatrix(t *testing.T) {
	for _, c := range matrixCases {
		t.Run(c.name, func(t *testing.T) {
			checkCase(t, Matrix(), c, matrixNow)
			checkMappedAgainstReference(t, matrixMapping, Matrix(), []byte(c.in), matrixNow)
		})
	}
	// A body of '<' written as \u003c six bytes each, as Go's JSON
	// writes it: 385 KiB of payload, one message.
	big := strings.Replace(matrixEvent("m.room.message", ""), `"hi"`, `"`+strings.Repeat(`\u003c`, 64<<10)+`"`, 1)
	got, err := Matrix().Decode([]byte(big), matrixNow, testSkew)
	if err != nil || got.Text != strings.Repeat("<", 64<<10) || !got.Counted {
		t.Fatalf("a 385 KiB message: %v, %d bytes of text", err, len(got.Text))
	}
}

// checkCase checks one table case against format f.
func checkCase(t *testing.T, f *Format, c decodeCase, now int64) {
	t.Helper()
	got, err := f.Decode([]byte(c.in), now, testSkew)
	if c.rsn == "" {
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Fatalf("Decode(%s) =\n %+v, %v; want\n %+v", show([]byte(c.in)), got, err, c.want)
		}
		return
	}
	if err == nil || err.Reason != c.rsn || err.Msg != c.msg {
		t.Fatalf("Decode(%s) = %+v, %v; want %s %q", show([]byte(c.in)), got, err, c.rsn, c.msg)
	}
	if !reflect.DeepEqual(got, Event{}) {
		t.Fatalf("Decode(%s) returned %+v with its error", show([]byte(c.in)), got)
	}
}

// testMappingFile is a mapping that uses what mapping files may: pointers
// with escapes and array indexes, fallbacks, seconds, numbers as type
// values and null for a missing type.
const testMappingFile = `# a test mapping
room: [/chat/room, /room~1id]
user: /from/0/name
ts: {pointer: /at, unit: s}
id: /id
text: /body
mentions: [/to, /cc/0]
type: /kind
message: [msg, 0, null]
join: hello
leave: [bye, 7]
`

func testMapping(t testing.TB) *Format {
	t.Helper()
	f, err := ParseMapping("test.yaml", []byte(testMappingFile))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// mapped is what most cases of the test mapping expect.
func mapped(mod func(*Event)) Event {
	e := Event{Event: chat.Event{Room: "lobby", User: "alice", TS: 1796022000000}, Counted: true}
	if mod != nil {
		mod(&e)
	}
	return e
}

func mp(rest string) string {
	return `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":1796022000` + rest + `}`
}

var mappingCases = []decodeCase{
	ok("minimal", mp(``), mapped(nil)),
	ok("fallback pointer", `{"room/id":"lobby","from":[{"name":"alice"}],"at":1796022000}`, mapped(nil)),
	ok("mentions", mp(`,"to":["bob","carol","bob"]`), mapped(func(e *Event) { e.Mentions = []string{"bob", "carol", "bob"} })),
	ok("mentions fallback in an array", mp(`,"to":null,"cc":[["bob",7]]`), mapped(func(e *Event) { e.Mentions = []string{"bob"} })),
	ok("mentions not an array ignored", mp(`,"to":"bob"`), mapped(nil)),
	ok("first pointer wins", `{"room/id":"x","chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":1796022000}`, mapped(nil)),
	ok("null falls back", `{"chat":{"room":null},"room/id":"lobby","from":[{"name":"alice"}],"at":1796022000}`, mapped(nil)),
	ok("seconds with a fraction", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":1796021999.1239}`, mapped(func(e *Event) { e.TS -= 877 })),
	ok("seconds as a string", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":"1796021999.5"}`, mapped(func(e *Event) { e.TS -= 500 })),
	ok("numbers as names and id", `{"chat":{"room":42},"from":[{"name":-7}],"at":1796022000,"id":184467}`,
		mapped(func(e *Event) { e.Room, e.User, e.ID = "42", "-7", "184467" })),
	ok("id and text", mp(`,"id":"m-1","body":"hi"`), mapped(func(e *Event) { e.ID, e.Text, e.HasText = "m-1", "hi", true })),
	ok("text not a string", mp(`,"body":["hi"]`), mapped(nil)),
	ok("type message", mp(`,"kind":"msg"`), mapped(nil)),
	ok("type a number", mp(`,"kind":0`), mapped(nil)),
	ok("type null is a message", mp(`,"kind":null`), mapped(nil)),
	ok("type join", mp(`,"kind":"hello"`), mapped(func(e *Event) { e.Kind = chat.KindJoin })),
	ok("type leave by number", mp(`,"kind":7`), mapped(func(e *Event) { e.Kind = chat.KindLeave })),
	ok("type 7.0 is not 7", mp(`,"kind":7.0`), Event{}),
	ok("type other", mp(`,"kind":"edit"`), Event{}),
	ok("an ignored event needs no room", `{"kind":"typing"}`, Event{}),
	ok("escaped keys match", `{"ch\u0061t":{"room":"lobby"},"from":[{"n\u0061me":"alice"}],"at":1796022000}`, mapped(nil)),
	ok("other elements and members skipped", `{"x":[{"a":1}],"chat":{"y":{},"room":"lobby"},"from":[{"name":"alice","z":[]},{"name":"bob"}],"at":1796022000}`, mapped(nil)),
	ok("key 0 in an object", `{"chat":{"room":"lobby"},"from":{"0":{"name":"alice"}},"at":1796022000}`, mapped(nil)),

	bad("no room", `{"from":[{"name":"alice"}],"at":1796022000}`, ReasonUnmapped, "room: no value at /chat/room or /room~1id"),
	bad("no user: the array is empty", `{"chat":{"room":"lobby"},"from":[],"at":1796022000}`, ReasonUnmapped, "user: no value at /from/0/name"),
	bad("no ts", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}]}`, ReasonUnmapped, "ts: no value at /at"),
	bad("ts with an exponent", mp(`e3`), ReasonUnmapped, "ts: /at: must be Unix seconds, a number without exponent, got 1796022000e3"),
	bad("ts a bool", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":true}`, ReasonUnmapped, "ts: /at: must be Unix seconds, got bool"),
	bad("ts before 1970", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":-5}`, ReasonInvalid,
		"ts: /at: must be 0..253402300799 (Unix seconds, years 1970..9999), got -5"),
	bad("ts before 1970, a fraction", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":-0.5}`, ReasonInvalid,
		"ts: /at: must be 0..253402300799 (Unix seconds, years 1970..9999), got -0.5"),
	bad("ts a string with a sign", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":"-5"}`, ReasonUnmapped,
		"ts: /at: must be Unix seconds, a number without exponent, got -5"),
	bad("ts past 9999", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":253402300800}`, ReasonInvalid,
		"ts: /at: must be 0..253402300799 (Unix seconds, years 1970..9999), got 253402300800"),
	bad("room a fraction", `{"chat":{"room":4.2},"from":[{"name":"alice"}],"at":1796022000}`, ReasonUnmapped,
		"room: /chat/room: must be a string or an integer, got number"),
	bad("room empty", `{"chat":{"room":""},"from":[{"name":"alice"}],"at":1796022000}`, ReasonInvalid, "room: /chat/room: must be 1..255 bytes, got 0"),
	bad("user invalid UTF-8", "{\"chat\":{\"room\":\"lobby\"},\"from\":[{\"name\":\"a\\ud800\"}],\"at\":1796022000}", ReasonInvalid,
		"user: /from/0/name: must be valid UTF-8"),
	bad("type an object", mp(`,"kind":{}`), ReasonUnmapped, "type: /kind: must be a string or a number, got object"),
	bad("duplicate in an array element", `{"chat":{"room":"lobby"},"from":[{"name":"alice","name":"bob"}],"at":1796022000}`, ReasonInvalid,
		"/from/0/name: duplicate key"),
	bad("duplicate on the way", `{"chat":{"room":"lobby"},"chat":{},"from":[{"name":"alice"}],"at":1796022000}`, ReasonInvalid, "/chat: duplicate key"),
	bad("the first duplicate in payload order", `{"from":[{"name":"a"}],"chat":{"room":"x","room":"y"},"from":[],"at":1}`, ReasonInvalid, "/chat/room: duplicate key"),
	bad("future", `{"chat":{"room":"lobby"},"from":[{"name":"alice"}],"at":1796022006}`, ReasonFuture,
		"ts: 2026-11-30T07:00:06.000Z is 6s ahead of the clock, more than the allowed skew of 5s"),
	bad("64 KiB + 1", mp(`,"pad":"`+strings.Repeat("p", MaxPayload+1-len(mp(`,"pad":""`)))+`"`), ReasonTooLarge,
		"payload is 65537 bytes, more than the limit of 65536"),
}

func TestDecodeMapping(t *testing.T) {
	f := testMapping(t)
	for _, c := range mappingCases {
		t.Run(c.name, func(t *testing.T) {
			checkCase(t, f, c, testNow)
			checkMappedAgainstReference(t, f.plan.spec, f, []byte(c.in), testNow)
		})
	}
}
