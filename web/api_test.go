package web

import (
	"errors"
	"strings"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

func TestDecodeCheck(t *testing.T) {
	good := map[string]checkRequest{
		`{"room":"lobby","user":"alice"}`:         {Room: "lobby", User: "alice"},
		` {"user":"a","room":"a/b","text":"hi"} `: {Room: "a/b", User: "a", Text: ptr("hi")},
		`{"room":"\u00e9","user":"b","text":""}`:  {Room: "é", User: "b", Text: ptr("")},
		`{"room":"r","user":"u","text":null}`:     {Room: "r", User: "u"},
	}
	for body, want := range good {
		got, err := decodeCheck([]byte(body))
		if err != nil || got.Room != want.Room || got.User != want.User || (got.Text == nil) != (want.Text == nil) || (got.Text != nil && *got.Text != *want.Text) {
			t.Errorf("%s: %+v %v", body, got, err)
		}
	}
	for body, want := range map[string]string{
		``:                                  "request must be a JSON object",
		`[]`:                                "request must be a JSON object",
		`{"room":"r","user":"u"} {}`:        "nothing after it",
		`{"room":"r","user":"u","usr":"x"}`: `unknown field "usr"`,
		`{"room":"","user":"u"}`:            "room: must be 1..128 bytes, got 0",
		`{"room":"r","user":"\u0007"}`:      "user: must not contain control characters, got U+0007",
		`{"room":"r","user":"u","text":5}`:  "cannot unmarshal number",
	} {
		_, err := decodeCheck([]byte(body))
		var bad *badRequest
		if !errors.As(err, &bad) || !strings.Contains(bad.msg, want) {
			t.Errorf("%s: %v, want a bad request saying %q", body, err, want)
		}
	}
}

func ptr(s string) *string { return &s }

// FuzzDecodeCheck: any body is either refused as a bad request or yields a
// request whose room and user are valid names.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range []string{`{"room":"lobby","user":"alice","text":"hi"}`, `{"room":"\ud800","user":"u"}`, `{}`, `null`, `{"room":"r","user":"u"}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCheck(body)
		if err != nil {
			var bad *badRequest
			if !errors.As(err, &bad) {
				t.Fatalf("%q: not a bad request: %v", body, err)
			}
			return
		}
		if chat.CheckName("room", req.Room) != nil || chat.CheckName("user", req.User) != nil {
			t.Fatalf("%q: accepted %+v", body, req)
		}
	})
}

func TestWithoutAsOf(t *testing.T) {
	in := `{"window":"1m","as_of":"2026-11-30T07:00:00.123Z","messages":3}`
	if got := string(withoutAsOf([]byte(in))); got != `{"window":"1m","as_of":"","messages":3}` {
		t.Fatal(got)
	}
}
