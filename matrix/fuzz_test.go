package matrix

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// seeds are the files of testdata/dendrite that match pattern: answers
// captured from Dendrite v0.13.8 (TestDendrite -capture).
func seeds(t testing.TB, pattern string) [][]byte {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join("testdata", "dendrite", pattern))
	if len(names) == 0 {
		t.Fatalf("no testdata/dendrite/%s: run TestDendrite with -capture", pattern)
	}
	var out [][]byte
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzPowerLevels: whatever parses, written back, parses again to the
// same levels and the same JSON; a user set is read back, every other
// key survives byte for byte, and the undo of the set (after a read, as
// chatpulse's unmute) restores the levels, and the JSON where the user
// had no entry (but for an empty users, where there was none).
func FuzzPowerLevels(f *testing.F) {
	for _, b := range seeds(f, "power_levels*.json") {
		f.Add(b, "@alice:localhost", -1)
		f.Add(b, "@chatpulse:localhost", 0)
	}
	f.Add([]byte(plBody), "@mod:localhost", 1)
	f.Add([]byte(`{"users":{"@a:b":"\u0035"}, "ban" : 5 }`), "@a:b", 7)
	f.Add([]byte(`{"\ud800":1,"users":{"\xff":2}}`), "\ufffd", 3)
	f.Fuzz(func(t *testing.T, content []byte, id string, level int) {
		pl, err := ParsePowerLevels(content)
		if err != nil {
			return
		}
		out := mustMarshal(t, pl)
		pl2 := mustParse(t, out)
		sameLevels(t, pl, pl2)
		sameJSON(t, content, []byte(out))

		if !utf8.ValidString(id) { // not a user id: its bytes would change on the way
			return
		}
		prev, had := pl2.User(id)
		pl2.SetUser(id, level)
		set := mustParse(t, mustMarshal(t, pl2))
		if n, ok := set.User(id); !ok || n != level {
			t.Fatalf("set %q to %d, read back %d, %v", id, level, n, ok)
		}
		for _, u := range pl.users {
			if n, _ := set.User(u.key); u.key != id && n != u.level {
				t.Fatalf("%q: %d became %d", u.key, u.level, n)
			}
		}
		for _, k := range pl.keys {
			if k.key == "users" {
				continue
			}
			if i := index(set.keys, k.key); i < 0 || !bytes.Equal(set.keys[i].value, k.value) {
				t.Fatalf("%q: %s did not survive a set", k.key, k.value)
			}
		}
		if had {
			set.SetUser(id, prev)
		} else {
			set.DeleteUser(id)
		}
		undone := mustMarshal(t, set)
		sameLevels(t, pl, mustParse(t, undone))
		if !had {
			// Read back after the set, the content has a users, if it
			// had none: the undo leaves it empty.
			if index(pl.keys, "users") < 0 {
				var v map[string]json.RawMessage
				if err := json.Unmarshal([]byte(undone), &v); err != nil || string(v["users"]) != "{}" {
					t.Fatalf("%s: users is not left empty: %s", content, undone)
				}
				delete(v, "users")
				undone = string(got(json.Marshal(v)).ok(t))
			}
			sameJSON(t, content, []byte(undone))
		}
	})
}

func index(entries []entry, key string) int {
	for i, e := range entries {
		if e.key == key {
			return i
		}
	}
	return -1
}

func sameLevels(t *testing.T, a, b *PowerLevels) {
	t.Helper()
	if !reflect.DeepEqual(a.levels, b.levels) && len(a.levels)+len(b.levels) > 0 {
		t.Fatalf("users %v became %v", a.levels, b.levels)
	}
	if !reflect.DeepEqual(a.events, b.events) && len(a.events)+len(b.events) > 0 {
		t.Fatalf("events %v became %v", a.events, b.events)
	}
	if a.usersDefault != b.usersDefault || a.eventsDefault != b.eventsDefault || a.stateDefault != b.stateDefault || a.red != b.red {
		t.Fatalf("defaults %v %v %v %v became %v %v %v %v", a.usersDefault, a.eventsDefault, a.stateDefault, a.red,
			b.usersDefault, b.eventsDefault, b.stateDefault, b.red)
	}
}

// sameJSON fails unless a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !reflect.DeepEqual(va, vb) {
		t.Fatalf("%s\nbecame\n%s", a, b)
	}
}

// FuzzErrorBody: whatever a homeserver answers, the Error keeps its
// status, reads its errcode and retry_after_ms as encoding/json reads
// them, waits never less than nothing, and reads as one bounded line
// without the token.
func FuzzErrorBody(f *testing.F) {
	for _, b := range seeds(f, "*.json") {
		f.Add(429, b, "", secret)
		f.Add(403, b, "1", secret)
	}
	f.Add(429, []byte(`{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":1e300}`), "Mon, 02 Jan 2006 15:04:12 GMT", secret)
	f.Add(401, []byte(`{"errcode":"M_UNKNOWN_TOKEN","error":"Unknown token `+secret+`"}`), "", secret)
	f.Add(502, []byte("<html>\n\x00\xff"+strings.Repeat("é", 400)), "99999999999999999999", "tok")
	f.Add(500, []byte(`{"errcode":5,"error":["x"],"retry_after_ms":"5","ERRCODE":"M_X"}`), "-1", "")
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter, token string) {
		h := http.Header{"Date": {"Mon, 02 Jan 2006 15:04:05 GMT"}}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		const op = "GET /_matrix/client/v3/account/whoami"
		e := errorOf(op, status, h, body, token)
		if e.Status != status || e.Op != op || e.RetryAfter < 0 {
			t.Fatalf("%+v", e)
		}
		for _, s := range []string{e.Code, e.Message} {
			if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 || len(s) > maxMessage+len("…") {
				t.Fatalf("%q: not one bounded line", s)
			}
		}
		if checkToken(token) == nil && len(token) >= 8 && !strings.Contains(op+http.StatusText(status), token) &&
			strings.Contains(e.Error(), token) {
			t.Fatalf("the token %q is in %q", token, e.Error())
		}

		// An oracle: encoding/json's reading of the body.
		var fields map[string]any
		if json.Unmarshal(body, &fields) != nil {
			return
		}
		if code, ok := fields["errcode"].(string); ok && code == strings.TrimSpace(code) && len(code) <= maxCode &&
			utf8.ValidString(code) && strings.IndexFunc(code, unicode.IsControl) < 0 && (token == "" || !strings.Contains(code, token)) &&
			e.Code != code {
			t.Fatalf("errcode %q read as %q", code, e.Code)
		}
		if _, saysHeader := retryAfterHeader(h); !saysHeader {
			ms, ok := fields["retry_after_ms"].(float64)
			want := time.Duration(0)
			if ok && ms > 0 && ms < float64(math.MaxInt64/int64(time.Millisecond)) {
				want = time.Duration(ms * float64(time.Millisecond))
			} else if ok && ms > 0 {
				want = math.MaxInt64
			}
			if e.RetryAfter != want {
				t.Fatalf("retry_after_ms %v read as %v, want %v", fields["retry_after_ms"], e.RetryAfter, want)
			}
		}
	})
}
