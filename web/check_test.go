package web

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
)

func TestDecodeCheck(t *testing.T) {
	good := map[string]checkRequest{
		`{"room":"lobby","user":"alice"}`:                          {Room: "lobby", User: "alice"},
		` {"user":"a","room":"a/b","text":"hi"} `:                  {Room: "a/b", User: "a", Text: ptr("hi")},
		`{"room":"\u00e9","user":"b","text":""}`:                   {Room: "é", User: "b", Text: ptr("")},
		`{"room":"r","user":"u","text":null}`:                      {Room: "r", User: "u"},
		`{"r\u006fom":"r","user":"u"}`:                             {Room: "r", User: "u"},                            // names match after unescaping
		`{"room":"\ud83d\ude00","user":"u"}`:                       {Room: "😀", User: "u"},                            // a surrogate pair
		`{"room":"\ufffd","user":"\\ud800"}`:                       {Room: "\uFFFD", User: `\ud800`},                  // U+FFFD itself; an escaped backslash
		"{\"room\":\"r\",\"user\":\"u\",\"text\":\"\xff\\udc00\"}": {Room: "r", User: "u", Text: ptr("\uFFFD\uFFFD")}, // text as an event's
		`{"room":"r","user":"u","mentions":["a","b","a"]}`:         {Room: "r", User: "u", Mentions: []string{"a", "b", "a"}},
		`{"room":"r","user":"u","mentions":[]}`:                    {Room: "r", User: "u"},
		`{"room":"r","user":"u","mentions":null}`:                  {Room: "r", User: "u"},
	}
	for body, want := range good {
		got, err := decodeCheck([]byte(body), chat.MaxNameLen)
		if err != nil || got.Room != want.Room || got.User != want.User || (got.Text == nil) != (want.Text == nil) || (got.Text != nil && *got.Text != *want.Text) ||
			!slices.Equal(got.Mentions, want.Mentions) {
			t.Errorf("%s: %+v %v", body, got, err)
		}
	}
	for body, want := range map[string]string{
		``:                                   "request must be a JSON object",
		`[]`:                                 "request must be a JSON object",
		`null`:                               "request must be a JSON object",
		`{"room":"r","user":"u"} {}`:         "after top-level value",
		`{"room":"r","user":"u","usr":"x"}`:  `unknown field "usr"`,
		`{"room":"r","user":"u","ts":1}`:     `unknown field "ts"`,
		`{"Room":"r","user":"u"}`:            `unknown field "Room"`,
		`{"ROOM":"r","user":"u"}`:            `unknown field "ROOM"`,
		`{"room":"r","room":"s","user":"u"}`: "room: duplicate key",
		`{"room":"r","user":"u","text":"a","text":"b"}`:                              "text: duplicate key",
		`{"room":"r","user":"u","user":null}`:                                        "user: duplicate key",
		`{"room":"","user":"u"}`:                                                     "room: must be 1..128 bytes, got 0",
		`{"user":"u"}`:                                                               "room: missing",
		`{"room":null,"user":"u"}`:                                                   "room: missing",
		`{"room":"lobby"}`:                                                           "user: missing",
		`{"room":"r","user":"\u0007"}`:                                               "user: must not contain control characters, got U+0007",
		`{"room":"r","user":"\u0085"}`:                                               "user: must not contain control characters, got U+0085",
		`{"room":"r","user":"u","text":5}`:                                           "text: must be a string",
		`{"room":"r","user":"u","mentions":"a"}`:                                     "mentions: must be a list",
		`{"room":"r","user":"u","mentions":["a",1]}`:                                 "mentions: must be a list of strings",
		`{"room":5,"user":"u"}`:                                                      "room: must be a string",
		`{"room":["r"],"user":"u"}`:                                                  "room: must be a string",
		`{"room":"\ud800","user":"u"}`:                                               "room: must be valid UTF-8",
		`{"room":"\udc00","user":"u"}`:                                               "room: must be valid UTF-8",
		`{"room":"a\ud800\u0041","user":"u"}`:                                        "room: must be valid UTF-8",
		`{"room":"\ud800\ud800","user":"u"}`:                                         "room: must be valid UTF-8",
		`{"room":"\ud83d","user":"u"}`:                                               "room: must be valid UTF-8",
		`{"room":"r","user":"\uDE00\uD83D"}`:                                         "user: must be valid UTF-8",
		"{\"room\":\"\xff\",\"user\":\"u\"}":                                         "room: must be valid UTF-8",
		"{\"room\":\"r\",\"user\":\"\xed\xa0\x80\"}":                                 "user: must be valid UTF-8", // a surrogate in UTF-8
		"{\"room\":\"r\xc3\",\"user\":\"u\"}":                                        "room: must be valid UTF-8",
		`{"room":"` + strings.Repeat("é", 65) + `","user":"u"}`:                      "room: must be 1..128 bytes, got 130",
		`{"room":"r","user":"u","text":"` + strings.Repeat("x", maxCheckBody) + `"}`: "request body over 65536 bytes",
	} {
		_, err := decodeCheck([]byte(body), chat.MaxNameLen)
		var bad *badRequest
		if !errors.As(err, &bad) || !strings.Contains(bad.msg, want) {
			t.Errorf("%s: %v, want a bad request saying %q", body, err, want)
		}
	}
}

func ptr(s string) *string { return &s }

// FuzzDecodeCheck: any body is either refused as a bad request, or is a
// request that the event decoder (ingest.Decode, the contract's rules for
// room, user and text) reads the same way.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range []string{
		`{"room":"lobby","user":"alice","text":"hi"}`, `{"room":"\ud800","user":"u"}`, `{"room":"\ud83d\ude00","user":"\\ud800"}`,
		`{}`, `null`, `{"room":"r","user":"u"}x`, `{"Room":"r","user":"u"}`, `{"room":"r","room":"r","user":"u"}`,
		"{\"room\":\"\xff\",\"user\":\"u\",\"text\":\"\xff\"}", `{"r\u006fom":"r","user":"u","text":"\udc00"}`,
		`{"room":"r","user":"u","mentions":["a","\ud800","\u00e9",""]}`, "{\"room\":\"r\",\"user\":\"u\",\"mentions\":[\"\xff\"]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCheck(body, chat.MaxNameLen)
		if refused(t, body, err) {
			return
		}
		ev, err := ingest.Decode(body, 0, math.MaxInt64)
		if err != nil {
			t.Fatalf("%q: accepted as %+v, but as an event: %v", body, req, err)
		}
		text, hasText := "", req.Text != nil
		if hasText {
			text = *req.Text
		}
		if ev.Room != req.Room || ev.User != req.User || ev.HasText != hasText || ev.Text != text || !slices.Equal(ev.Mentions, req.Mentions) {
			t.Fatalf("%q: check %+v, event %+v", body, req, ev)
		}
	})
}

// refused reports whether a body was refused (err is not nil), and fails
// t if it was for anything but a bad request.
func refused(t *testing.T, body []byte, err error) bool {
	t.Helper()
	var bad *badRequest
	if err != nil && !errors.As(err, &bad) {
		t.Fatalf("%q: not a bad request: %v", body, err)
	}
	return err != nil
}

// A check that carries text and mentions is decided for its message's
// cost (docs/contract.md section 15), over HTTP, over NATS (the same
// CheckRequest) and asked by Synapse (content.m.mentions); one without
// them costs its messages weight.
func TestCheckCosts(t *testing.T) {
	ss := newSynapseServer(t, []throttle.Policy{{Name: "pings", Scope: throttle.ScopeUserInRoom, Algorithm: throttle.AlgSlidingWindow,
		Limit: 3, Window: time.Minute, Cost: throttle.Cost{Mentions: 1, Links: 2}}})
	decision := func(body string) throttle.Decision {
		t.Helper()
		res, err := ss.CheckRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return res.(throttle.Result).Decisions[0]
	}
	if d := decision(`{"room":"!x:hs","user":"@spam:hs","text":"see http://a","mentions":["a","a"]}`); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("a message of cost 3: %+v", d)
	}
	if d := decision(`{"room":"!x:hs","user":"@spam:hs","text":"see http://a","mentions":["a","b"]}`); d.Allowed || d.Count != 0 {
		t.Fatalf("a message of cost 4: %+v", d)
	}
	if d := decision(`{"room":"!x:hs","user":"@spam:hs","consume":true,"id":"m1","text":"hi","mentions":["a","b"]}`); !d.Allowed || d.Count != 0 {
		t.Fatalf("a consuming check of cost 2: %+v", d)
	}
	if d := decision(`{"room":"!x:hs","user":"@spam:hs"}`); !d.Allowed || d.Count != 2 {
		t.Fatalf("without text nor mentions, the messages weight, 0: %+v", d)
	}
	status, _ := ss.post(t, "check_event_for_spam", moduleEvent("m.room.message", "$m2", "!x:hs", "@spam:hs", "", testNow.UnixMilli(),
		map[string]any{"body": "@b hi", "msgtype": "m.text", "m.mentions": map[string]any{"user_ids": []string{"@b:hs"}}}), "s3cret")
	if status != http.StatusOK {
		t.Fatalf("Synapse's message of cost 1: %d", status)
	}
	status, body := ss.post(t, "check_event_for_spam", moduleEvent("m.room.message", "$m3", "!x:hs", "@spam:hs", "", testNow.UnixMilli(),
		map[string]any{"body": "@b hi", "msgtype": "m.text", "m.mentions": map[string]any{"user_ids": []string{"@b:hs"}}}), "s3cret")
	if status != http.StatusTooManyRequests {
		t.Fatalf("Synapse's message over: %d %v", status, body)
	}
}
