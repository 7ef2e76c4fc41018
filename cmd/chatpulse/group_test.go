package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// natsServer starts a NATS server with JetStream in the test process, on
// a random port, and returns its URL.
func natsServer(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL()
}

// startGroup starts n members of group g against url, each on its own
// clock (nil: the wall clock), and waits until the group is complete.
func startGroup(t *testing.T, url, g string, n int, now func() time.Time, args ...string) []*testMain {
	t.Helper()
	var ms []*testMain
	for i := range n {
		a := append([]string{"--nats-url", url, "--group", g, "--instance", fmt.Sprint("m", i), "--partitions", "8"}, args...)
		ms = append(ms, startMainAt(t, now, a...))
	}
	waitComplete(t, ms[0], n)
	return ms
}

// groupStatus is GET /api/v1/group.
type groupStatus struct {
	Group      string `json:"group"`
	Partitions int    `json:"partitions"`
	Complete   bool   `json:"complete"`
	Members    []struct {
		Instance string `json:"instance"`
		HTTP     string `json:"http"`
		Owns     int    `json:"owns"`
		Lag      uint64 `json:"lag"`
	} `json:"members"`
}

// waitComplete waits until tm sees a complete group of n members.
func waitComplete(t *testing.T, tm *testMain, n int) groupStatus {
	t.Helper()
	var st groupStatus
	eventually(t, 30*time.Second, fmt.Sprintf("a complete group of %d", n), func() bool {
		st = groupStatus{}
		tm.get("/api/v1/group", &st)
		return st.Complete && len(st.Members) == n
	})
	return st
}

// publishGroup publishes evs on chat.<room>.<user>, as group mode asks,
// each acknowledged by the stream.
func publishGroup(t *testing.T, url string, evs []chat.Event) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	for i, e := range evs {
		subject := "chat." + chat.Token(e.Room) + "." + chat.Token(e.User)
		if _, err := js.Publish(ctx, subject, []byte(eventJSON(e, i))); err != nil {
			t.Fatal(err)
		}
	}
}

// sameGroupJSON is sameJSON for a group's view, which must say it is
// complete; want is the oracle's (standalone) view.
func (tm *testMain) sameGroupJSON(path string, want any) bool {
	var got map[string]any
	if status := tm.get(path, &got); status != http.StatusOK {
		tm.t.Fatalf("GET %s: status %d: %v", path, status, got)
	}
	if got["complete"] != true || got["missing_partitions"] != float64(0) {
		return false
	}
	delete(got, "complete")
	delete(got, "missing_partitions")
	b, _ := json.Marshal(want)
	var w map[string]any
	json.Unmarshal(b, &w)
	return reflect.DeepEqual(got, w)
}

// compareGroup checks every view of every window on tm against the oracle,
// allowing the time it takes the group to catch up.
func (tm *testMain) compareGroup(o *oracle.Oracle, now int64, evs []chat.Event) {
	tm.t.Helper()
	rooms, users := map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		rooms[e.Room], users[e.User] = true, true
	}
	check := func(path string, want any) {
		tm.t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !tm.sameGroupJSON(path, want) {
			if time.Now().After(deadline) {
				var got any
				tm.get(path, &got)
				g, _ := json.Marshal(got)
				b, _ := json.Marshal(want)
				tm.t.Fatalf("GET %s\n got %s\nwant %s", path, g, b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, w := range []string{"1m", "5m", "1h"} {
		check("/api/v1/overview?k=100&window="+w, o.Overview(w, 100, now))
		check("/api/v1/rooms?limit=1000&window="+w, o.Rooms(w, 1000, now))
		for room := range rooms {
			check("/api/v1/rooms/"+url.PathEscape(room)+"?k=100&window="+w, o.Room(room, w, 100, now))
		}
		for user := range users {
			check("/api/v1/users/"+url.PathEscape(user)+"?window="+w, o.User(user, w, now))
		}
	}
}

// groupTrace is a random trace with names that need escaping in subjects.
func groupTrace(seed uint64, now int64, n int) []chat.Event {
	evs := randomTrace(rand.New(rand.NewPCG(seed, 3)), now, n)
	odd := []string{"dot.room", "space room", "pct%room", "a.b", "star*", "gt>"}
	for i := range evs {
		if i%7 == 0 {
			evs[i].Room = odd[i%len(odd)]
		}
		if i%11 == 0 {
			evs[i].User = odd[(i/11)%len(odd)]
		}
	}
	return evs
}

// Three members on one NATS server: every view on every member equals
// what one standalone instance gives for the same events.
func TestGroupEqualsStandalone(t *testing.T) {
	url := natsServer(t)
	clock := newFrozen()
	ms := startGroup(t, url, "g", 3, clock.Now)
	now := clock.ms.Load()
	evs := groupTrace(5, now, 2000)
	publishGroup(t, url, evs)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(now, evs)
	for _, tm := range ms {
		tm.compareGroup(o, now, evs)
	}
	st := waitComplete(t, ms[1], 3)
	owns := 0
	for _, m := range st.Members {
		owns += m.Owns
	}
	if owns != 8 || st.Partitions != 8 || st.Group != "g" {
		t.Fatalf("status %+v", st)
	}
}
