package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTimeJSON(t *testing.T) {
	for ms, want := range map[Time]string{
		1_764_486_000_123: `"2025-11-30T07:00:00.123Z"`,
		0:                 `"1970-01-01T00:00:00.000Z"`,
		-1:                `"1969-12-31T23:59:59.999Z"`,
	} {
		b, err := json.Marshal(ms)
		if err != nil || string(b) != want {
			t.Errorf("Marshal(%d) = %s, %v; want %s", ms, b, err, want)
		}
		if ms.String() != strings.Trim(want, `"`) {
			t.Errorf("String(%d) = %s", ms, ms)
		}
		var back Time
		if err := json.Unmarshal(b, &back); err != nil || back != ms {
			t.Errorf("Unmarshal(%s) = %d, %v", b, back, err)
		}
	}
	var v Time
	if err := json.Unmarshal([]byte(`"2026-11-30T08:00:00.5+01:00"`), &v); err != nil || v.String() != "2026-11-30T07:00:00.500Z" {
		t.Errorf("offset: %v, %v", v, err)
	}
	for _, bad := range []string{`1`, `"yesterday"`, `null x`} {
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("Unmarshal(%s): no error", bad)
		}
	}
}

func TestCheckName(t *testing.T) {
	for name, want := range map[string]string{
		"lobby":                           "",
		"dot.room":                        "",
		"pct%room space":                  "",
		"größe":                           "",
		strings.Repeat("a", 128):          "",
		"":                                "room: must be 1..128 bytes, got 0",
		strings.Repeat("a", 129):          "room: must be 1..128 bytes, got 129",
		strings.Repeat("é", 65):           "room: must be 1..128 bytes, got 130",
		"a\x00b":                          "room: must not contain control characters, got U+0000",
		"a\x7f":                           "room: must not contain control characters, got U+007F",
		"a\u0085":                         "room: must not contain control characters, got U+0085",
		"\xff":                            "room: must be valid UTF-8",
		"\xed\xa0\x80":                    "room: must be valid UTF-8", // a lone surrogate
		"\xff" + strings.Repeat("a", 200): "room: must be valid UTF-8",
		"\ufffd":                          "",
		"a\x00\u0085\xff":                 "room: must be valid UTF-8",
		strings.Repeat("é", 65) + "\x01":  "room: must be 1..128 bytes, got 131",
		"\ufffd\u0085\x00":                "room: must not contain control characters, got U+0085",
	} {
		got := ""
		if err := CheckName("room", name); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("CheckName(%q) = %q, want %q", name, got, want)
		}
	}
}

// Names read from another chat system may be longer; the rest of the
// rule is the same.
func TestCheckNameLen(t *testing.T) {
	for name, want := range map[string]string{
		strings.Repeat("a", 255):          "",
		"!3rYnfsG2FsJdpctO:matrix.org":    "",
		"@alice:example.com":              "",
		strings.Repeat("a", 256):          "room: must be 1..255 bytes, got 256",
		"":                                "room: must be 1..255 bytes, got 0",
		"@a\x00:b":                        "room: must not contain control characters, got U+0000",
		"@a\u0085:b":                      "room: must not contain control characters, got U+0085",
		"\xff" + strings.Repeat("a", 300): "room: must be valid UTF-8",
	} {
		got := ""
		if err := CheckNameLen("room", name, MaxForeignNameLen); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("CheckNameLen(%q, 255) = %q, want %q", name, got, want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindMessage: "message", KindJoin: "join", KindLeave: "leave", 7: "Kind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", k, got, want)
		}
	}
	if (Event{}).Kind != KindMessage {
		t.Error("an Event without a Kind is not a message")
	}
}

// Every byte value, at every place of names of every length up to three
// words, is judged as the rule says: CheckName reads a name in words and
// halves that overlap, and each byte must be looked at by one of them.
func TestCheckNameEveryByte(t *testing.T) {
	for n := 1; n <= 24; n++ {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				s := string(b)
				ok := c >= 0x20 && c < 0x7f
				if err := CheckName("user", s); (err == nil) != ok {
					t.Fatalf("CheckName(%q) = %v, want ok=%v", s, err, ok)
				}
			}
		}
	}
}

// FuzzCheckName holds CheckName to the rule written plainly, and its
// error to the first part of the rule that s breaks.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"lobby", "", "a\x00", "\xff", "größe", "\u0085", strings.Repeat("x", 129), "\ufffd\x01\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok := utf8.ValidString(s) && len(s) >= 1 && len(s) <= MaxNameLen && strings.IndexFunc(s, unicode.IsControl) < 0
		err := CheckName("user", s)
		if (err == nil) != ok {
			t.Fatalf("CheckName(%q) = %v, want ok=%v", s, err, ok)
		}
		want := "<nil>"
		switch ctl := strings.IndexFunc(s, unicode.IsControl); {
		case !utf8.ValidString(s):
			want = "user: must be valid UTF-8"
		case len(s) < 1 || len(s) > MaxNameLen:
			want = fmt.Sprintf("user: must be 1..%d bytes, got %d", MaxNameLen, len(s))
		case ctl >= 0:
			r, _ := utf8.DecodeRuneInString(s[ctl:])
			want = fmt.Sprintf("user: must not contain control characters, got %U", r)
		}
		if fmt.Sprint(err) != want {
			t.Fatalf("CheckName(%q) = %v, want %s", s, err, want)
		}
	})
}

func TestToken(t *testing.T) {
	for in, want := range map[string]string{
		"lobby":      "lobby",
		"dot.room":   "dot%2Eroom",
		"space room": "space%20room",
		"pct%room":   "pct%25room",
		"a.b":        "a%2Eb",
		"*>":         "%2A%3E",
		"tab\there":  "tab%09here",
		"del\x7f":    "del%7F",
		"größe":      "größe",
		"%2E":        "%252E",
	} {
		if got := Token(in); got != want {
			t.Errorf("Token(%q) = %q, want %q", in, got, want)
		}
		if !IsToken(want, in) {
			t.Errorf("IsToken(%q, %q) = false", want, in)
		}
	}
}

// FuzzToken: a token is what IsToken accepts for its name and no other,
// holds no separator, wildcard or white space, and two names never share
// one.
func FuzzToken(f *testing.F) {
	for _, s := range []string{"lobby", "dot.room", "pct%room", "a b", "%2E", ""} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, tb := Token(a), Token(b)
		if !IsToken(ta, a) || strings.ContainsAny(ta, ".*> \t\r\n") {
			t.Fatalf("Token(%q) = %q", a, ta)
		}
		if (ta == tb) != (a == b) || IsToken(ta, b) != (a == b) {
			t.Fatalf("Token(%q) = %q, Token(%q) = %q", a, ta, b, tb)
		}
	})
}
