package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// policiesFile writes a policies file of the given YAML and returns its
// path.
func policiesFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Joins and leaves published on NATS are counted per room and window
// beside the messages and apart from them (docs/contract.md section 12):
// a room's view and the overview say how many, with series_joins, as the
// oracle does; a join makes nobody a talker, a distinct user or a room
// active; a late join is rejected as a late message is; a join of a user
// already joined counts nowhere. A join_wave policy alerts once when a
// room's joins cross it, and lists the room as active.
func TestJoinsEndToEnd(t *testing.T) {
	clock := newFrozen()
	tm := startMainAt(t, clock.Now, "--policies", policiesFile(t, `policies:
  - {name: raid, scope: room, algorithm: join_wave, limit: 3, window: 1h}
`))
	alerts := make(chan *nats.Msg, 16)
	if _, err := tm.nc.ChanSubscribe("chatpulse.alerts.throttle", alerts); err != nil {
		t.Fatal(err)
	}
	tm.nc.Flush()

	now := clock.ms.Load()
	ev := func(kind chat.Kind, room, user string, ago int64) chat.Event {
		return chat.Event{Kind: kind, Room: room, User: user, TS: now - ago}
	}
	evs := []chat.Event{
		ev(chat.KindMessage, "lobby", "alice", 1000),
		ev(chat.KindJoin, "lobby", "newcomer0", 900),
		ev(chat.KindMessage, "lobby", "alice", 800),
		ev(chat.KindJoin, "lobby", "newcomer1", 120_000), // the 5m and 1h windows only, out of order
		ev(chat.KindJoin, "lobby", "newcomer2", 700),
		ev(chat.KindJoin, "lobby", "newcomer2", 650), // again, joined: counted nowhere, nor by the raid
		ev(chat.KindLeave, "lobby", "newcomer0", 600),
		ev(chat.KindJoin, "lobby", "newcomer3", 500),    // the fourth: the wave crosses
		ev(chat.KindJoin, "lobby", "newcomer4", 400),    // still over: no second alert
		ev(chat.KindJoin, "quiet", "lurker", 300),       // a room with joins alone
		ev(chat.KindJoin, "lobby", "ghost", 3*3600_000), // older than every window
	}
	for i, e := range evs {
		tm.publish("chat."+e.Room+"."+e.User, eventJSON(e, i))
	}
	tm.waitReceived(len(evs))

	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	if late := o.Observe(now, evs); len(late) != 1 {
		t.Fatalf("the oracle finds %v late", late)
	}
	for _, w := range []string{"1m", "5m", "1h"} {
		tm.sameJSON("/api/v1/overview?k=100&window="+w, o.Overview(w, 100, now))
		for _, room := range []string{"lobby", "quiet", "nobody"} {
			tm.sameJSON("/api/v1/rooms/"+room+"?k=100&window="+w, o.Room(room, w, 100, now))
		}
	}
	// What the oracle says, said plainly for the 1m window.
	var lobby struct {
		Messages, Joins, Leaves, DistinctUsers int64
		SeriesJoins                            []int64                 `json:"series_joins"`
		TopUsers                               []struct{ User string } `json:"top_users"`
	}
	tm.get("/api/v1/rooms/lobby?window=1m", &lobby)
	sum := int64(0)
	for _, n := range lobby.SeriesJoins {
		sum += n
	}
	if lobby.Messages != 2 || lobby.Joins != 4 || lobby.Leaves != 1 || sum != 4 || len(lobby.TopUsers) != 1 || lobby.TopUsers[0].User != "alice" {
		t.Errorf("lobby in 1m: %+v; want 2 messages by alice alone, 4 joins (in series_joins too), 1 leave", lobby)
	}
	type counts struct {
		Messages, Joins, Leaves int64
		DistinctUsers           int64 `json:"distinct_users"`
		ActiveRooms             int64 `json:"active_rooms"`
	}
	var overview counts
	tm.get("/api/v1/overview?window=5m", &overview)
	if overview != (counts{2, 6, 1, 1, 1}) {
		t.Errorf("overview in 5m: %+v; want 2 messages, 6 joins, 1 leave, 1 distinct user, 1 active room", overview)
	}
	if got := tm.metric(`chatpulse_events_rejected_total{reason="late"}`); got != 1 {
		t.Errorf("late rejections = %v, want 1 (the old join)", got)
	}

	// One alert for the crossing, at the fourth join of the hour.
	select {
	case m := <-alerts:
		var a throttle.Alert
		if err := json.Unmarshal(m.Data, &a); err != nil || a.Policy != "raid" || a.Room != "lobby" || a.Count != 4 || a.Limit != 3 {
			t.Errorf("alert %s (%v), want raid in lobby, 4 of 3", m.Data, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no alert for the raid")
	}
	tm.published(tm.nc)
	select {
	case m := <-alerts:
		t.Errorf("a second alert: %s", m.Data)
	default:
	}
	var active struct {
		Active []throttle.Active `json:"active"`
	}
	tm.get("/api/v1/throttle/active", &active)
	if len(active.Active) != 1 || active.Active[0].Policy != "raid" || active.Active[0].Room != "lobby" {
		t.Errorf("active %s, want the raid in lobby", fmt.Sprint(active.Active))
	}
}
