package throttle

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

var update = flag.Bool("update", false, "write the golden states of testdata/ anew")

// goldenSet is a Set of statePolicies (every algorithm and scope, repeat
// policies enforcing and shadow) with a hash key of its own, fixed so
// that its state is the same on every run, after a random trace: keys of
// long names, hashed keys marked and keeping their names, late messages,
// sweeps, and with maxKeys 30, keys the cap evicted.
// It returns the Set and the time of the trace's last message.
func goldenSet(t *testing.T, maxKeys int) (*Set, int64) {
	s := mustSet(t, statePolicies(), WithMaxKeys(maxKeys))
	b := s.AppendState(nil)
	for i := range hashKeyLen { // the key follows the version byte
		b[1+i] = byte(7*i + 1)
	}
	if err := s.LoadState(b); err != nil {
		t.Fatal(err)
	}
	tr := &stateTrace{r: rand.New(rand.NewPCG(uint64(maxKeys), 19))}
	for i := range 40 {
		s.ObserveBatch(tr.events(), nil, nil)
		tr.now += tr.r.Int64N(30)
		room, user, text := tr.names()
		s.Observe(chat.Event{TS: at(tr.now), Room: room, User: user, Text: text})
		if i%9 == 8 {
			s.Sweep(at(tr.now + tr.r.Int64N(3000)))
		}
	}
	return s, at(tr.now)
}

// The state saved today is, byte for byte, the state saved when testdata/
// was written, and what testdata/ holds loads and saves again as it was:
// the format does not change unseen.
//
//	go test ./throttle/ -run Golden -update   # after a change of the format
func TestGoldenStates(t *testing.T) {
	for _, maxKeys := range []int{30, DefaultMaxKeys} {
		s, now := goldenSet(t, maxKeys)
		path := filepath.Join("testdata", fmt.Sprintf("state-max%d.golden", maxKeys))
		saved := s.AppendState(nil)
		if *update {
			if err := os.WriteFile(path, saved, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		golden, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(saved, golden) {
			t.Errorf("%s: saved today as %d bytes that differ from the %d it holds", path, len(saved), len(golden))
		}
		fresh := mustSet(t, statePolicies(), WithMaxKeys(maxKeys))
		if err := fresh.LoadState(golden); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		verifySet(t, fresh)
		if again := fresh.AppendState(nil); !bytes.Equal(again, golden) {
			t.Errorf("%s: loaded, saves %d bytes that differ from the %d it loaded", path, len(again), len(golden))
		}
		var keys, evicted int
		for _, st := range fresh.Stats() {
			keys += st.Keys
			evicted += int(st.Evicted)
		}
		repeats := 0 // marked keys of repeat policies, which keep their names
		for _, a := range fresh.Active(now) {
			if strings.HasPrefix(a.Policy, "dup") {
				repeats++
			}
		}
		if keys < 100 || maxKeys == 30 && evicted == 0 || repeats == 0 {
			t.Errorf("%s: %d keys, %d evicted, %d repeat keys active: too little to test", path, keys, evicted, repeats)
		}
	}
}
