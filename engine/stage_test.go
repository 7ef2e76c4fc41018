package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// A stage counts a repeated join nowhere: not in its room's joins, not in
// a join wave, as ingest hands it a batch (Count, then Throttle). Five
// members of a room change their display names (a join each, again):
// a join wave of limit 5 sees the room's five joins, not ten, and does
// not alert; a sixth new member makes it cross.
func TestStageRepeatedJoins(t *testing.T) {
	ws, _ := rolling.ParseWindows("1m")
	agg, _ := aggregator.New(ws)
	thr, err := throttle.NewSet([]throttle.Policy{{Name: "raid", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgJoinWave, Limit: 5, Window: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Stage{Agg: agg, Thr: thr}
	const t0 = 1_764_000_000_000
	var alerts []throttle.Alert
	feed := func(evs []chat.Event) {
		late := s.Count(t0+10, evs, nil)
		if len(late) > 0 {
			t.Fatalf("late: %v", late)
		}
		s.Throttle(evs, make([]bool, len(evs)), func(a throttle.Alert) { alerts = append(alerts, a) })
	}
	var evs []chat.Event
	for i := range 5 {
		evs = append(evs, chat.Event{Room: "r", User: fmt.Sprint("u", i), TS: t0 + int64(i), Kind: chat.KindJoin})
	}
	for i := range 5 {
		evs = append(evs, chat.Event{Room: "r", User: fmt.Sprint("u", i), TS: t0 + 5 + int64(i), Kind: chat.KindJoin})
	}
	feed(evs)
	v, _ := agg.Room("r", "1m", 0, t0+10)
	if v.Joins != 5 || len(alerts) != 0 {
		t.Fatalf("five joins and five repeats: %d joins, alerts %+v", v.Joins, alerts)
	}
	feed([]chat.Event{{Room: "r", User: "u5", TS: t0 + 10, Kind: chat.KindJoin}})
	if len(alerts) != 1 || alerts[0].Count != 6 {
		t.Fatalf("a sixth member: alerts %+v, want one crossing of 6", alerts)
	}
}
