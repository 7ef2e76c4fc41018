package matrix

import (
	"encoding/json"
	"strings"
	"testing"
)

// A room's power levels as Dendrite v0.13.8 made them for a public_chat
// room, with a few keys of other homeservers and old rooms added.
const plBody = `{"ban":50,"events":{"m.room.avatar":50,"m.room.message":"10"},"events_default":0,` +
	`"invite":0,"kick":50,"notifications":{"room":50},"redact":50,"state_default":50,` +
	`"users":{"@bot:localhost":100,"@mod:localhost":" 60 ","@old:localhost":"+5"},"users_default":0,` +
	`"org.example.custom":{"nested":[1,"x",{"users":{"@a:b":1}}]}}`

func mustParse(t testing.TB, s string) *PowerLevels {
	t.Helper()
	pl, err := ParsePowerLevels([]byte(s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return pl
}

func mustMarshal(t testing.TB, pl *PowerLevels) string {
	t.Helper()
	b, err := pl.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatalf("MarshalJSON wrote invalid JSON: %s", b)
	}
	return string(b)
}

func TestPowerLevelsRead(t *testing.T) {
	pl := mustParse(t, plBody)
	for _, c := range []struct {
		id   string
		want int
		set  bool
	}{
		{"@bot:localhost", 100, true},
		{"@mod:localhost", 60, true}, // a numeric string, spaced
		{"@old:localhost", 5, true},  // with a sign
		{"@alice:localhost", 0, false},
	} {
		if n, set := pl.User(c.id); n != c.want || set != c.set {
			t.Errorf("User(%s) = %d, %v; want %d, %v", c.id, n, set, c.want, c.set)
		}
		if n := pl.UserLevel(c.id); n != c.want {
			t.Errorf("UserLevel(%s) = %d, want %d", c.id, n, c.want)
		}
	}
	for _, c := range []struct {
		typ   string
		state bool
		want  int
	}{
		{"m.room.message", false, 10}, // events, as a string
		{"m.room.avatar", true, 50},
		{"m.reaction", false, 0},     // events_default
		{"m.room.topic", true, 50},   // state_default
		{"m.room.message", true, 10}, // events wins over either default
	} {
		if n := pl.EventLevel(c.typ, c.state); n != c.want {
			t.Errorf("EventLevel(%s, %v) = %d, want %d", c.typ, c.state, n, c.want)
		}
	}
	if pl.Redact() != 50 {
		t.Errorf("Redact() = %d", pl.Redact())
	}
}

func TestPowerLevelsDefaults(t *testing.T) {
	for _, pl := range []*PowerLevels{mustParse(t, `{}`), new(PowerLevels)} {
		if n := pl.UserLevel("@a:b"); n != 0 {
			t.Errorf("UserLevel = %d, want users_default's default 0", n)
		}
		if n := pl.EventLevel("m.room.message", false); n != 0 {
			t.Errorf("message EventLevel = %d, want events_default's default 0", n)
		}
		if n := pl.EventLevel("m.room.name", true); n != 50 {
			t.Errorf("state EventLevel = %d, want state_default's default 50", n)
		}
		if n := pl.Redact(); n != 50 {
			t.Errorf("Redact = %d, want 50", n)
		}
	}
	pl := mustParse(t, `{"users_default":"-3","events_default":7,"state_default":"0","redact":-1}`)
	if pl.UserLevel("@a:b") != -3 || pl.EventLevel("x", false) != 7 || pl.EventLevel("x", true) != 0 || pl.Redact() != -1 {
		t.Errorf("set defaults not read: %d %d %d %d", pl.UserLevel("@a:b"), pl.EventLevel("x", false), pl.EventLevel("x", true), pl.Redact())
	}
}

func TestPowerLevelsRefused(t *testing.T) {
	for _, s := range []string{
		``, `null`, `[]`, `"users"`, `{`, `{}x`, `{} {}`, `{"a":1,}`,
		`{"users":{"@a:b":50.5}}`, `{"users":{"@a:b":1e2}}`, `{"users":{"@a:b":"fifty"}}`,
		`{"users":{"@a:b":null}}`, `{"users":{"@a:b":true}}`, `{"users":{"@a:b":""}}`,
		`{"users":{"@a:b":"5.0"}}`, `{"users":{"@a:b":99999999999999999999}}`,
		`{"users":[]}`, `{"users":null}`, `{"events":{"m.room.message":{}}}`,
		`{"redact":null}`, `{"state_default":"x"}`,
		`{"users":{},"users":{}}`,            // duplicate key
		`{"users":{"@a:b":1,"@a:b":2}}`,      // duplicate user
		`{"users":{"@a:b":1,"\u0040a:b":2}}`, // the same, escaped
	} {
		if pl, err := ParsePowerLevels([]byte(s)); err == nil {
			t.Errorf("%s: accepted as %s", s, mustMarshal(t, pl))
		}
	}
	// Keys chatpulse does not read may hold anything.
	mustParse(t, `{"ban":"x","kick":null,"notifications":{"room":1.5},"invite":[]}`)
}

// TestPowerLevelsWriteBack: unchanged, the content goes back byte for
// byte (from compact JSON); a mute changes one entry and writes a number;
// the undo gives the content back, byte for byte again.
func TestPowerLevelsWriteBack(t *testing.T) {
	pl := mustParse(t, plBody)
	if got := mustMarshal(t, pl); got != plBody {
		t.Fatalf("unchanged content written as\n%s\nnot\n%s", got, plBody)
	}

	// A user with no entry: muted, then deleted again.
	pl.SetUser("@alice:localhost", -1)
	muted := mustMarshal(t, pl)
	want := strings.Replace(plBody, `"+5"}`, `"+5","@alice:localhost":-1}`, 1)
	if muted != want {
		t.Fatalf("muted:\n%s\nwant\n%s", muted, want)
	}
	again := mustParse(t, muted)
	again.DeleteUser("@alice:localhost")
	if got := mustMarshal(t, again); got != plBody {
		t.Fatalf("unmuted:\n%s\nwant\n%s", got, plBody)
	}

	// A user with an entry, a numeric string: muted in place, then put
	// back as a number (what chatpulse writes).
	pl = mustParse(t, plBody)
	prev, _ := pl.User("@mod:localhost")
	pl.SetUser("@mod:localhost", 9)
	want = strings.Replace(plBody, `" 60 "`, `9`, 1)
	if got := mustMarshal(t, pl); got != want {
		t.Fatalf("set in place:\n%s\nwant\n%s", got, want)
	}
	pl.SetUser("@mod:localhost", prev)
	want = strings.Replace(plBody, `" 60 "`, `60`, 1)
	if got := mustMarshal(t, pl); got != want {
		t.Fatalf("put back:\n%s\nwant\n%s", got, want)
	}

	// No users key: one is added last only while it has an entry.
	pl = mustParse(t, `{"ban":50}`)
	pl.SetUser("@a:b", 3)
	if got := mustMarshal(t, pl); got != `{"ban":50,"users":{"@a:b":3}}` {
		t.Errorf("users added as %s", got)
	}
	pl.DeleteUser("@a:b")
	pl.DeleteUser("@never:b")
	if got := mustMarshal(t, pl); got != `{"ban":50}` {
		t.Errorf("users deleted as %s", got)
	}
	// An empty users stays.
	pl = mustParse(t, `{"users":{"@a:b":3}}`)
	pl.DeleteUser("@a:b")
	if got := mustMarshal(t, pl); got != `{"users":{}}` {
		t.Errorf("last user deleted as %s", got)
	}
	// The zero value writes only what was set.
	var zero PowerLevels
	zero.SetUser("@a:b", 1)
	if got := mustMarshal(t, &zero); got != `{"users":{"@a:b":1}}` {
		t.Errorf("zero value written as %s", got)
	}
}

// TestPowerLevelsJSON: a PowerLevels inside a struct goes through
// encoding/json both ways.
func TestPowerLevelsJSON(t *testing.T) {
	var v struct{ Content *PowerLevels }
	if err := json.Unmarshal([]byte(`{"Content":`+plBody+`}`), &v); err != nil {
		t.Fatal(err)
	}
	if n := v.Content.UserLevel("@mod:localhost"); n != 60 {
		t.Fatalf("UserLevel = %d", n)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Content":` + plBody + `}`; string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
}
