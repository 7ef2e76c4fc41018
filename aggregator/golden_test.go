package aggregator_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/chatpulse/chatpulse/aggregator"
)

var update = flag.Bool("update", false, "write the golden states of testdata/ anew")

const goldenWindows = "1m,5m,1h"

// goldenStates are the aggregators whose states testdata/ keeps, as this
// code saved them: an empty one, and one that a random trace (with late
// events, gaps, a clock that steps back, joins and leaves) left with
// rooms, users, joins and cells in every window.
func goldenStates(t *testing.T) map[string]*aggregator.Aggregator {
	empty, _ := aggregator.New(mustWindows(t, goldenWindows))
	s := newSim(t, 5, goldenWindows)
	for i := range 600 {
		s.step(i)
	}
	if st := s.agg.Stats(); st.Pairs < 50 || st.Crowds < 3 || st.Late[0] == 0 {
		t.Fatalf("the trace leaves %+v: too little to test", st)
	}
	return map[string]*aggregator.Aggregator{"state-empty": empty, "state": s.agg}
}

// The state saved today is the state saved when testdata/ was written,
// and what testdata/ holds loads, answers as the aggregator it was saved
// from, and saves again as it was: the format does not change unseen.
// (A state lists its users in the order of a map, so two saves of one
// aggregator may differ in that order alone: canonicalState sorts it out.)
//
//	go test ./aggregator/ -run Golden -update   # after a change of the format
func TestGoldenStates(t *testing.T) {
	for name, a := range goldenStates(t) {
		path := filepath.Join("testdata", name+".golden")
		saved := a.AppendState(nil)
		if *update {
			if err := os.WriteFile(path, saved, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		golden, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(saved) != len(golden) { // canonicalState reads every byte, this says so
			t.Errorf("%s: %d bytes saved today, %d in testdata", name, len(saved), len(golden))
		}
		want := canonicalState(t, golden)
		if got := canonicalState(t, saved); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: saved today as\n%q\nnot as testdata holds it\n%q", name, got, want)
		}
		fresh, _ := aggregator.New(mustWindows(t, goldenWindows))
		if err := fresh.LoadState(golden); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := canonicalState(t, fresh.AppendState(nil)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: loaded, saves as\n%q\nnot as it loaded\n%q", name, got, want)
		}
		if !reflect.DeepEqual(fresh.Stats(), a.Stats()) {
			t.Errorf("%s: loaded, holds %+v, not %+v", name, fresh.Stats(), a.Stats())
		}
		for _, w := range a.WindowNames() {
			got, err1 := fresh.Overview(w, 100, 0)
			want, err2 := a.Overview(w, 100, 0)
			if err1 != nil || err2 != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: overview %s: %v %v\n%+v\n%+v", name, w, err1, err2, got, want)
			}
		}
	}
}

// loadOldGolden loads testdata/state-v<version>.golden, a state of an
// older format, into a fresh aggregator.
func loadOldGolden(t *testing.T, version byte) ([]byte, *aggregator.Aggregator) {
	t.Helper()
	name := fmt.Sprintf("state-v%d.golden", version)
	golden, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if golden[0] != version {
		t.Fatalf("testdata/%s is of format %d", name, golden[0])
	}
	fresh, _ := aggregator.New(mustWindows(t, goldenWindows))
	if err := fresh.LoadState(golden); err != nil {
		t.Fatal(err)
	}
	return golden, fresh
}

// A state of format 3, saved before memberships were kept, still loads:
// as a state that knows none, with the same counts, and saves again as
// it was, but for its version and the (empty) memberships.
func TestGoldenStateFormat3(t *testing.T) {
	golden, fresh := loadOldGolden(t, 3)
	if st := fresh.Stats(); st.Members != 0 || st.Crowds == 0 {
		t.Errorf("loaded, holds %+v", st)
	}
	want := canonicalState(t, golden)
	got := canonicalState(t, fresh.AppendState(nil))
	if got[0] != "head 04"+want[0][len("head 03"):] {
		t.Errorf("saved again, begins %q, not %q", got[0], want[0])
	}
	if i := slices.Index(got, "members in 0 rooms"); i < 0 || !reflect.DeepEqual(slices.Delete(got, i, i+1)[1:], want[1:]) {
		t.Errorf("saved again as\n%q\nnot as loaded\n%q", got, want)
	}
}

// A state of format 2, saved before joins and leaves were counted, still
// loads: as a state without any, answering as the aggregator it was saved
// from (the same trace of messages alone), and saving again as that one
// saves today.
func TestGoldenStateFormat2(t *testing.T) {
	s := newSim(t, 5, goldenWindows)
	s.kinds = false
	for i := range 600 {
		s.step(i)
	}
	_, fresh := loadOldGolden(t, 2)
	if got, want := canonicalState(t, fresh.AppendState(nil)), canonicalState(t, s.agg.AppendState(nil)); !reflect.DeepEqual(got, want) {
		t.Errorf("loaded, saves as\n%q\nnot as the trace's aggregator\n%q", got, want)
	}
	if !reflect.DeepEqual(fresh.Stats(), s.agg.Stats()) {
		t.Errorf("loaded, holds %+v, not %+v", fresh.Stats(), s.agg.Stats())
	}
	for _, w := range s.agg.WindowNames() {
		got, err := fresh.Overview(w, 100, 0)
		want, _ := s.agg.Overview(w, 100, 0)
		if err != nil || !reflect.DeepEqual(got, want) || got.Joins != 0 || got.Leaves != 0 {
			t.Errorf("overview %s: %v\n%+v\n%+v", w, err, got, want)
		}
	}
}

// canonicalState is a state's bytes with its users, crowds and members
// sorted: what comes before the crowds as it is, each crowd's record
// (name, cells), each membership (format 4: room, user, ts, join),
// each room's record (name, pairs), and each user's record with its pairs'
// room numbers replaced by the rooms' names. It reads with encoding/binary
// alone, apart from the readers it checks; a state of format 2 has no
// crowds.
func canonicalState(t *testing.T, b []byte) []string {
	t.Helper()
	fail := func(what string) {
		t.Helper()
		t.Fatalf("not a state (%s) at byte %d", what, len(b))
	}
	uvarint := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			fail("number")
		}
		b = b[n:]
		return v
	}
	str := func() string {
		n := uvarint()
		if n > uint64(len(b)) {
			fail("length")
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	all := b
	if len(b) == 0 {
		fail("empty")
	}
	version := b[0]
	b = b[1:]
	windows := uvarint()
	for range windows {
		str()
		uvarint()
		uvarint()
	}
	if _, n := binary.Varint(b); n <= 0 {
		fail("clock")
	} else {
		b = b[n:]
	}
	for range windows {
		uvarint()
	}
	tally := func() string { // one tally's cells in one window
		n := uvarint()
		s := fmt.Sprintf(" %d:", n)
		for range n {
			s += fmt.Sprintf(" %d,%d", uvarint(), uvarint())
		}
		return s
	}
	cells := func() string { // a pair's cells in every window
		var s string
		for range windows {
			s += tally()
		}
		return s
	}
	out := []string{fmt.Sprintf("head %x", all[:len(all)-len(b)])}
	if version >= 3 {
		ncrowds := uvarint()
		var crowds []string
		for range ncrowds {
			c := fmt.Sprintf("crowd %q", str())
			for range windows {
				c += " joins" + tally()
				c += " leaves" + tally()
			}
			crowds = append(crowds, c)
		}
		slices.Sort(crowds)
		out = append(out, fmt.Sprintf("crowds %d", ncrowds))
		out = append(out, crowds...)
	}
	if version >= 4 {
		nrooms := uvarint()
		var members []string
		for range nrooms {
			room := str()
			for range uvarint() {
				user := str()
				ts, n := binary.Varint(b)
				if n <= 0 || len(b) == n {
					fail("member")
				}
				members = append(members, fmt.Sprintf("member %q %q %d %d", room, user, ts, b[n]))
				b = b[n+1:]
			}
		}
		slices.Sort(members)
		out = append(out, fmt.Sprintf("members in %d rooms", nrooms))
		out = append(out, members...)
	}
	head := len(out)
	var rooms []string
	nrooms := uvarint()
	for range nrooms {
		name := str()
		rooms = append(rooms, name)
		out = append(out, fmt.Sprintf("room %q %d", name, uvarint()))
	}
	out = append(out, fmt.Sprintf("users %d pairs %d", uvarint(), uvarint()))
	var users []string
	for len(b) > 0 {
		u := fmt.Sprintf("user %q", str())
		for range uvarint() {
			ri := uvarint()
			if ri >= uint64(len(rooms)) {
				fail("room number")
			}
			u += fmt.Sprintf(" (%q%s)", rooms[ri], cells())
		}
		users = append(users, u)
	}
	slices.Sort(out[head : head+int(nrooms)])
	slices.Sort(users)
	return append(out, users...)
}
