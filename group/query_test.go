package group

import (
	"encoding/json"
	"strings"
	"testing"
)

// A member answers what it knows, and says so of a question of another
// version or an op it does not know, naming what it does know: a rolling
// upgrade mixes versions.
func TestUnknownQuestions(t *testing.T) {
	for _, c := range []struct {
		question string
		unknown  string // what the answer's error says; "": answered
	}{
		{`{"v":1,"op":"overview","parts":[1]}`, ""},
		{`{"v":1,"op":"check","parts":[1]}`, ""},
		{`{"v":2,"op":"overview","parts":[1]}`, "protocol version 2; this member speaks 1"},
		{`{"op":"overview","parts":[1]}`, "protocol version 0"},
		{`{"v":1,"op":"consume","parts":[1]}`, ""},
		{`{"v":1,"op":"join","parts":[1]}`, ""},
		{`{"v":1,"op":"join_wave","parts":[1]}`, `unknown op "join_wave"; this member knows [overview rooms room user check consume join unconsume active book]`},
	} {
		var q question
		if err := json.Unmarshal([]byte(c.question), &q); err != nil {
			t.Fatal(err)
		}
		a := unknown(q)
		switch {
		case c.unknown == "" && a != nil:
			t.Errorf("%s: %+v, want it answered", c.question, a)
		case c.unknown != "" && (a == nil || !a.Unknown || !strings.Contains(a.Error, c.unknown)):
			t.Errorf("%s: %+v, want unknown, %q", c.question, a, c.unknown)
		}
	}
}
