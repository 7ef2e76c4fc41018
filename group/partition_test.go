package group

import (
	"slices"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/throttle"
)

// A stage sends the alerts of a run and records its sequence together,
// only while its partition may act: once the lease's validity is over, or
// the partition is halted, neither, so the next holder, which replays
// from the recorded sequence, sends exactly what this one did not.
func TestStageFence(t *testing.T) {
	thr, err := throttle.NewSet([]throttle.Policy{{Name: "p", Scope: throttle.ScopeUser, Algorithm: throttle.AlgSlidingWindow,
		Limit: 1, Window: time.Hour, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce}})
	if err != nil {
		t.Fatal(err)
	}
	live, lost := true, make(chan struct{}, 2)
	f := &fence{live: func() bool { return live }, lost: func() { lost <- struct{}{} }}
	s := &stage{Stage: &engine.Stage{Name: stageUser, Thr: thr}, fence: f}
	var sent []string
	send := func(a throttle.Alert) { sent = append(sent, a.User) }
	// Each run crosses the limit of a new user: two messages of it.
	run := func(user string, seq uint64) {
		evs := []chat.Event{{Room: "r", User: user, TS: 1000}, {Room: "r", User: user, TS: 1000}}
		s.Throttle(evs, []bool{false, false}, send)
		s.Handled(seq, false)
	}
	steps := []struct {
		name   string
		before func()
		user   string
		seq    uint64
		sent   []string
		at     uint64 // the stage's sequence after
	}{
		{name: "valid", user: "a", seq: 2, sent: []string{"a"}, at: 2},
		{name: "validity over", before: func() { live = false }, user: "b", seq: 4, sent: []string{"a"}, at: 2},
		{name: "live again: b was neither sent nor recorded, so never again", before: func() { live = true }, user: "c", seq: 6, sent: []string{"a"}, at: 2},
		{name: "halted", before: f.halt, user: "d", seq: 8, sent: []string{"a"}, at: 2},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		run(st.user, st.seq)
		if !slices.Equal(sent, st.sent) {
			t.Errorf("%s: sent %v, want %v", st.name, sent, st.sent)
		}
		if got := s.Seq(); got != st.at {
			t.Errorf("%s: at %d, want %d", st.name, got, st.at)
		}
	}
	if f.acting() {
		t.Error("a halted partition acts")
	}
	<-lost // the partition was stopped when it found itself not live
	select {
	case <-lost:
		t.Error("lost twice")
	default:
	}
}

// What a stage took in after its partition stopped acting is kept, with
// its alerts held back: a parked stage that resumes under a new claim
// sends them, records itself handled through all of it, and reads on
// from the message after.
func TestStageResume(t *testing.T) {
	thr, err := throttle.NewSet([]throttle.Policy{{Name: "p", Scope: throttle.ScopeUser, Algorithm: throttle.AlgSlidingWindow,
		Limit: 1, Window: time.Hour, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce}})
	if err != nil {
		t.Fatal(err)
	}
	live := true
	s := &stage{Stage: &engine.Stage{Name: stageUser, Thr: thr}, fence: &fence{live: func() bool { return live }}, feed: &bus.Feed{}}
	var sent []string
	send := func(a throttle.Alert) { sent = append(sent, a.User) }
	run := func(user string, seq uint64) {
		evs := []chat.Event{{Room: "r", User: user, TS: 1000}, {Room: "r", User: user, TS: 1000}}
		s.Throttle(evs, []bool{false, false}, send)
		s.Handled(seq, false)
	}
	run("a", 2)
	live = false // the lease ran out: b and c are taken in, not alerted
	run("b", 4)
	run("c", 6)
	s.act(func() { sent = append(sent, "dead letter") })
	if !slices.Equal(sent, []string{"a"}) || s.Seq() != 2 {
		t.Fatalf("after the lease ran out: sent %v, at %d; want [a] at 2", sent, s.Seq())
	}
	if !s.settled() || s.next() != 7 {
		t.Fatalf("settled %v, next %d; want true, 7", s.settled(), s.next())
	}
	// Resumed under a new claim.
	s.fence = &fence{live: func() bool { return true }}
	s.flush()
	if want := []string{"a", "b", "c", "dead letter"}; !slices.Equal(sent, want) || s.Seq() != 6 {
		t.Errorf("resumed: sent %v, at %d; want %v at 6", sent, s.Seq(), want)
	}
	run("d", 8)
	if want := []string{"a", "b", "c", "dead letter", "d"}; !slices.Equal(sent, want) || s.Seq() != 8 {
		t.Errorf("after: sent %v, at %d; want %v at 8", sent, s.Seq(), want)
	}
}
