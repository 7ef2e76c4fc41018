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
	live, lost := true, make(chan struct{}, 2)
	f := &fence{live: func() bool { return live }, lost: func() { lost <- struct{}{} }}
	s, sent, run := crossingStage(t, f)
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
		if !slices.Equal(*sent, st.sent) {
			t.Errorf("%s: sent %v, want %v", st.name, *sent, st.sent)
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
	live := true
	s, alerts, run := crossingStage(t, &fence{live: func() bool { return live }})
	s.feed = &bus.Feed{} // stopped, having delivered nothing
	run("a", 2)
	live = false // the lease ran out: b and c are taken in, not alerted
	run("b", 4)
	run("c", 6)
	s.act(func() { *alerts = append(*alerts, "dead letter") })
	sent := *alerts
	if !slices.Equal(sent, []string{"a"}) || s.Seq() != 2 {
		t.Fatalf("after the lease ran out: sent %v, at %d; want [a] at 2", sent, s.Seq())
	}
	if !s.settled() || s.next() != 7 {
		t.Fatalf("settled %v, next %d; want true, 7", s.settled(), s.next())
	}
	// Resumed under a new claim.
	s.fence = &fence{live: func() bool { return true }}
	s.flush()
	if want, sent := []string{"a", "b", "c", "dead letter"}, *alerts; !slices.Equal(sent, want) || s.Seq() != 6 {
		t.Errorf("resumed: sent %v, at %d; want %v at 6", sent, s.Seq(), want)
	}
	run("d", 8)
	if want, sent := []string{"a", "b", "c", "dead letter", "d"}, *alerts; !slices.Equal(sent, want) || s.Seq() != 8 {
		t.Errorf("after: sent %v, at %d; want %v at 8", sent, s.Seq(), want)
	}
}

// crossingStage is a user stage behind fence f with a policy of one
// message an hour, what it sent, and run, which hands it a run of two
// messages of user (a crossing) through sequence seq.
func crossingStage(t *testing.T, f *fence) (s *stage, sent *[]string, run func(user string, seq uint64)) {
	t.Helper()
	thr, err := throttle.NewSet([]throttle.Policy{{Name: "p", Scope: throttle.ScopeUser, Algorithm: throttle.AlgSlidingWindow,
		Limit: 1, Window: time.Hour, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce}})
	if err != nil {
		t.Fatal(err)
	}
	s = &stage{Stage: &engine.Stage{Name: stageUser, Thr: thr}, fence: f}
	sent = new([]string)
	send := func(a throttle.Alert) { *sent = append(*sent, a.User) }
	return s, sent, func(user string, seq uint64) {
		evs := []chat.Event{{Room: "r", User: user, TS: 1000}, {Room: "r", User: user, TS: 1000}}
		s.Throttle(evs, []bool{false, false}, send)
		s.Handled(seq, false)
	}
}
