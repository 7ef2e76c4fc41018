package group

import (
	"slices"
	"testing"
	"time"

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
