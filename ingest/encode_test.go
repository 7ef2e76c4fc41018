package ingest

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

// Every Matrix sample a group would file, decoded, filed in chatpulse's
// own format and read back, is the same event.
func TestAppendNativeMatrixSamples(t *testing.T) {
	files, _ := filepath.Glob("testdata/matrix/*.payload.json")
	filed := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		ev, derr := Matrix().Decode(data, MaxTS, 0)
		if derr != nil || !ev.Counted {
			continue // dead-lettered or skipped, not filed
		}
		filed++
		roundTrip(t, Matrix(), ev)
	}
	if filed < 5 {
		t.Fatalf("%d of %d samples filed, want the messages, joins and leaves", filed, len(files))
	}
}

// Random events, with every byte that JSON escapes and names of up to 255
// bytes, read back the same through the format a group's partitions read
// filed events with.
func TestAppendNativeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "é", "👋", `"`, `\`, "<", "\u2028", " ", "/", "z"}
	str := func(n int, ctl bool) string {
		b := []byte{}
		for len(b) < n {
			if ctl && r.IntN(8) == 0 {
				b = append(b, byte(r.IntN(0x20)))
				continue
			}
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		return string(b)
	}
	n := 0
	for range 2000 {
		ev := Event{Counted: true}
		ev.Room, ev.User = str(1+r.IntN(250), false), str(1+r.IntN(250), false)
		if len(ev.Room) > chat.MaxForeignNameLen || len(ev.User) > chat.MaxForeignNameLen || chat.CheckNameLen("", ev.Room, 255) != nil || chat.CheckNameLen("", ev.User, 255) != nil {
			continue
		}
		ev.TS = r.Int64N(MaxTS)
		ev.Kind = chat.Kind(r.IntN(3))
		if r.IntN(2) == 0 {
			ev.ID = str(r.IntN(40), true)
		}
		if r.IntN(3) > 0 {
			ev.Text, ev.HasText = str(r.IntN(200), true), true
		}
		for range r.IntN(4) {
			ev.Mentions = append(ev.Mentions, str(r.IntN(40), true))
		}
		roundTrip(t, Matrix(), ev)
		n++
	}
	if n < 1000 {
		t.Fatalf("only %d events tried", n)
	}
}

func roundTrip(t *testing.T, f *Format, ev Event) {
	t.Helper()
	data := AppendNative(nil, ev)
	got, err := f.Filed().Decode(data, MaxTS, 0)
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	if !reflect.DeepEqual(got, ev) {
		t.Fatalf("filed %s\nread back %+v\nwant      %+v", data, got, ev)
	}
}
