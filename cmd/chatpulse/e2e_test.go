package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// frozen is a wall clock that stands still unless moved.
type frozen struct{ ms atomic.Int64 }

func newFrozen() *frozen {
	f := &frozen{}
	f.ms.Store(time.Now().Truncate(time.Millisecond).UnixMilli())
	return f
}

func (f *frozen) Now() time.Time { return time.UnixMilli(f.ms.Load()) }

// randomTrace is n events around now: skewed rooms and users (with names
// that need escaping), late ones inside and outside the windows, ties, and
// a few slightly ahead of the clock.
func randomTrace(r *rand.Rand, now int64, n int) []chat.Event {
	rooms := []string{"lobby", "a/b", "é", "support-eu", "100%", "q?x=1", "dev", "ops", "random", "x#y"}
	users := make([]string, 40)
	for i := range users {
		users[i] = fmt.Sprintf("u%02d", i)
	}
	users[1], users[2] = "alice", "bob"
	pick := func(n int) int { return min(n-1, int(r.ExpFloat64()*float64(n)/4)) }
	evs := make([]chat.Event, n)
	for i := range evs {
		var ts int64
		switch p := r.IntN(100); {
		case p < 60:
			ts = now - r.Int64N(50_000) // inside every window
		case p < 80:
			ts = now - 70_000 - r.Int64N(200_000) // the 5m and 1h windows only
		case p < 92:
			ts = now - 400_000 - r.Int64N(3_000_000) // the 1h window only
		case p < 96:
			ts = now - 3*3600_000 - r.Int64N(3600_000) // older than every window: late
		default:
			ts = now + r.Int64N(3000) // ahead, within the skew
		}
		evs[i] = chat.Event{Room: rooms[pick(len(rooms))], User: users[pick(len(users))], TS: ts}
	}
	return evs
}

// withJoins makes about one event in eight a join and one in sixteen a
// leave (docs/contract.md section 12), late ones and all.
func withJoins(r *rand.Rand, evs []chat.Event) []chat.Event {
	for i := range evs {
		switch r.IntN(16) {
		case 0, 1:
			evs[i].Kind = chat.KindJoin
		case 2:
			evs[i].Kind = chat.KindLeave
		}
	}
	return evs
}

func eventJSON(e chat.Event, id int) string {
	text := e.Text
	if text == "" {
		text = "hello there"
	}
	m := map[string]any{
		"id": fmt.Sprint("m-", id), "room": e.Room, "user": e.User,
		"ts": time.UnixMilli(e.TS).UTC().Format(time.RFC3339Nano), "text": text,
	}
	if e.Kind != chat.KindMessage {
		m["type"] = e.Kind.String()
	}
	if len(e.Mentions) > 0 {
		m["mentions"] = e.Mentions
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// publishTrace publishes evs, waits until chatpulse has them all, and
// returns the oracle fed the same, with the indexes of the late ones.
func (tm *testMain) publishTrace(now int64, evs []chat.Event) (*oracle.Oracle, []int) {
	tm.t.Helper()
	for i, e := range evs {
		tm.publish("chat.x.y", eventJSON(e, i))
	}
	tm.waitReceived(len(evs))
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	return o, o.Observe(now, evs)
}

// sameJSON compares an HTTP answer with the oracle's view, through JSON.
func (tm *testMain) sameJSON(path string, want any) {
	tm.t.Helper()
	var got any
	if status := tm.get(path, &got); status != http.StatusOK {
		tm.t.Fatalf("GET %s: status %d: %v", path, status, got)
	}
	b, _ := json.Marshal(want)
	var w any
	json.Unmarshal(b, &w)
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		tm.t.Fatalf("GET %s\n got %s\nwant %s", path, g, b)
	}
}

// compareAll checks every view of every window against the oracle.
func (tm *testMain) compareAll(o *oracle.Oracle, now int64, evs []chat.Event) {
	tm.t.Helper()
	rooms, users := map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		rooms[e.Room], users[e.User] = true, true
	}
	for _, w := range []string{"1m", "5m", "1h"} {
		tm.sameJSON("/api/v1/overview?k=100&window="+w, o.Overview(w, 100, now))
		tm.sameJSON("/api/v1/rooms?limit=1000&window="+w, o.Rooms(w, 1000, now))
		for room := range rooms {
			tm.sameJSON("/api/v1/rooms/"+url.PathEscape(room)+"?k=100&window="+w, o.Room(room, w, 100, now))
		}
		for user := range users {
			tm.sameJSON("/api/v1/users/"+url.PathEscape(user)+"?window="+w, o.User(user, w, now))
		}
	}
}

// Every view of every window, fed messages, joins and leaves (late ones
// too), is the oracle's.
func TestEndToEndOracle(t *testing.T) {
	clock := newFrozen()
	tm := startMainAt(t, clock.Now)
	now := clock.ms.Load()
	r := rand.New(rand.NewPCG(1, 2))
	evs := withJoins(r, randomTrace(r, now, 3000))
	o, late := tm.publishTrace(now, evs)
	if len(late) == 0 {
		t.Fatal("the trace should hold late events")
	}
	tm.compareAll(o, now, evs)
	if got := tm.metric(`chatpulse_events_rejected_total{reason="late"}`); got != float64(len(late)) {
		t.Fatalf("late rejections = %v, want %d", got, len(late))
	}
	if got := tm.metric("chatpulse_events_accepted_total"); got != float64(len(evs)-len(late)) {
		t.Fatalf("accepted = %v, want %d", got, len(evs)-len(late))
	}

	// Time passes with no traffic: counts fall, with no ticker needed.
	clock.ms.Add(90_000)
	tm.compareAll(o, now+90_000, evs)
}

// Every rejection reason reaches its dead-letter subject, unchanged and
// explained, and good events after bad ones still count.
func TestDeadLetters(t *testing.T) {
	tm := startMain(t)
	dead := make(chan *nats.Msg, 100)
	sub, err := tm.nc.ChanSubscribe("chatpulse.deadletter.>", dead)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	tm.nc.Flush()
	now := time.Now()
	bad := []struct{ reason, payload string }{
		{"malformed", `{"room":"lobby","user":`},
		{"malformed", `{"room":42,"user":"alice"}`},
		{"invalid", `{"user":"alice"}`},
		{"invalid", `{"room":"lobby","user":"alice","ts":"yesterday"}`},
		{"too_large", `{"room":"lobby","user":"alice","text":"` + strings.Repeat("x", 70_000) + `"}`},
		{"late", fmt.Sprintf(`{"room":"lobby","user":"alice","ts":%d}`, now.Add(-3*time.Hour).UnixMilli())},
		{"future", fmt.Sprintf(`{"room":"lobby","user":"alice","ts":%d}`, now.Add(time.Hour).UnixMilli())},
	}
	for _, b := range bad {
		msg := nats.NewMsg("chat.lobby.alice")
		msg.Data = []byte(b.payload)
		msg.Header.Set("X-Trace", "t-1")
		if err := tm.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		tm.publish("chat.lobby.alice", `{"room":"lobby","user":"alice","text":"still here"}`)
	}
	tm.waitReceived(len(bad) + 3)

	got := map[string][]*nats.Msg{}
	for range bad {
		select {
		case m := <-dead:
			got[m.Subject] = append(got[m.Subject], m)
			t.Logf("%s: %s", m.Subject, m.Header.Get("Chatpulse-Error"))
		case <-time.After(10 * time.Second):
			t.Fatalf("dead letters: only %d of %d arrived", len(got), len(bad))
		}
	}
	for _, b := range bad {
		subject := "chatpulse.deadletter." + b.reason
		i := slices.IndexFunc(got[subject], func(m *nats.Msg) bool { return string(m.Data) == b.payload })
		if i < 0 {
			t.Errorf("%s: no dead letter with the payload unchanged", b.reason)
			continue
		}
		m := got[subject][i]
		if m.Header.Get("Chatpulse-Error") == "" || m.Header.Get("X-Trace") != "t-1" || m.Header.Get("Chatpulse-Subject") != "chat.lobby.alice" {
			t.Errorf("%s: headers %v", b.reason, m.Header)
		}
	}
	var v aggregator.Room
	tm.get("/api/v1/rooms/lobby", &v)
	if v.Messages != 3 {
		t.Fatalf("lobby has %d messages, want 3", v.Messages)
	}
	for reason, want := range map[string]float64{"malformed": 2, "invalid": 2, "too_large": 1, "late": 1, "future": 1} {
		if got := tm.metric(`chatpulse_events_rejected_total{reason="` + reason + `"}`); got != want {
			t.Errorf("rejected %s = %v, want %v", reason, got, want)
		}
	}
	// With JetStream the dead letters are kept.
	js, _ := tm.nc.JetStream()
	info, err := js.StreamInfo("CHATPULSE_DEADLETTER")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(bad)) {
		t.Fatalf("dead-letter stream holds %d, want %d", info.State.Msgs, len(bad))
	}
}

func TestHTTPErrors(t *testing.T) {
	tm := startMain(t)
	tm.publish("chat.x.y", `{"room":"a/b","user":"alice"}`)
	tm.waitReceived(1)
	for path, want := range map[string]string{
		"/api/v1/overview?window=2m":                `unknown window "2m"; configured: 1m, 5m, 1h`,
		"/api/v1/overview?k=0":                      `k must be an integer 1..100, got "0"`,
		"/api/v1/overview?k=abc":                    `k must be an integer 1..100, got "abc"`,
		"/api/v1/rooms?limit=1001":                  `limit must be an integer 1..1000, got "1001"`,
		"/api/v1/rooms/lobby?k=101":                 `k must be an integer 1..100, got "101"`,
		"/api/v1/users/alice?window=x":              `unknown window "x"; configured: 1m, 5m, 1h`,
		"/api/v1/rooms/" + strings.Repeat("r", 129): "room: must be 1..128 bytes, got 129",
	} {
		var e struct{ Error string }
		if status := tm.get(path, &e); status != http.StatusBadRequest || e.Error != want {
			t.Errorf("GET %s: %d %q, want 400 %q", path, status, e.Error, want)
		}
	}
	var e struct{ Error string }
	if status := tm.get("/api/v1/nope", &e); status != http.StatusNotFound || e.Error == "" {
		t.Errorf("unknown endpoint: %d %q", status, e.Error)
	}
	// An escaped slash is part of the room's name.
	var room aggregator.Room
	if tm.get("/api/v1/rooms/a%2Fb", &room); room.Room != "a/b" || room.Messages != 1 {
		t.Fatalf("a%%2Fb: %+v", room)
	}
	// A room without messages answers zeros and nulls.
	var empty map[string]any
	tm.get("/api/v1/rooms/nobody-here?window=5m", &empty)
	if empty["messages"] != 0.0 || empty["top_talker"] != nil || len(empty["series"].([]any)) != 60 || len(empty["top_users"].([]any)) != 0 {
		t.Fatalf("empty room: %v", empty)
	}
	var windows aggregator.Windows
	tm.get("/api/v1/windows", &windows)
	if fmt.Sprint(windows) != "{[{1m 60 1} {5m 300 5} {1h 3600 60}]}" {
		t.Fatalf("windows: %v", windows)
	}
	for body, want := range map[string]string{
		`{"room":"lobby"}`:                     "user: missing",
		`{"room":"lobby","user":"a","x":1}`:    `unknown field "x"`,
		`not json`:                             "request must be a JSON object",
		`{"room":"lobby","user":"a","text":1}`: "text: must be a string",
	} {
		var e struct{ Error string }
		if status := tm.post("/api/v1/throttle/check", body, &e); status != http.StatusBadRequest || !strings.Contains(e.Error, want) {
			t.Errorf("check %s: %d %q, want 400 containing %q", body, status, e.Error, want)
		}
	}
	resp, _ := http.Get(tm.url + "/healthz")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz %d", resp.StatusCode)
	}
}
