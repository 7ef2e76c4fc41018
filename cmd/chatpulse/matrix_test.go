package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/dendrite"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/rolling"
)

// homeserver is a Dendrite run for a test (internal/dendrite), its
// JetStream on the test's NATS server; a call that fails fails the test.
type homeserver struct {
	*dendrite.Server
	t *testing.T
}

// matrixUser is a registered user and its access token.
type matrixUser = dendrite.User

// startDendrite runs Dendrite against natsURL until the test ends.
// Without it installed the test skips, unless CI=true: then it fails, as
// the other tests that need a tool do.
func startDendrite(t *testing.T, natsURL string) *homeserver {
	t.Helper()
	s, err := dendrite.Start(dendrite.Need(t), t.TempDir(), natsURL, &syncBuffer{t: t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return &homeserver{s, t}
}

// ok fails the test with err, if there is one, and returns v.
func (hs *homeserver) ok(v string, err error) string {
	hs.t.Helper()
	if err != nil {
		hs.t.Fatal(err)
	}
	return v
}

func (hs *homeserver) call(method, path, token string, body, out any) {
	hs.ok("", hs.Call(method, path, token, body, out))
}

func (hs *homeserver) register(name string) matrixUser {
	u, err := hs.Register(name)
	hs.ok("", err)
	return u
}

func (hs *homeserver) createRoom(u matrixUser, name string) string {
	return hs.ok(hs.CreateRoom(u, name))
}

func (hs *homeserver) join(u matrixUser, room string)  { hs.ok("", hs.Join(u, room)) }
func (hs *homeserver) leave(u matrixUser, room string) { hs.ok("", hs.Leave(u, room)) }

func (hs *homeserver) send(u matrixUser, room, evType string, content map[string]any) string {
	return hs.ok(hs.Send(u, room, evType, content))
}

func (hs *homeserver) redact(u matrixUser, room, event string) { hs.ok("", hs.Redact(u, room, event)) }

func (hs *homeserver) ts(u matrixUser, room, event string) int64 {
	ts, err := hs.TS(u, room, event)
	hs.ok("", err)
	return ts
}

// following is a wall clock that can be stopped: views compared with the
// oracle are all asked at one instant.
type following struct{ at atomic.Int64 }

func (f *following) Now() time.Time {
	if ms := f.at.Load(); ms != 0 {
		return time.UnixMilli(ms)
	}
	return time.Now()
}

// startMatrix runs NATS, Dendrite on it, then chatpulse reading Dendrite's
// room events through a stream of its own that sources Dendrite's: the
// command of docs/input.md. chatpulse starts after Dendrite has made its
// streams, and the test waits until the server sources them, before any
// room event: Dendrite's stream keeps nothing nobody has interest in.
func startMatrix(t *testing.T, now func() time.Time) (*homeserver, *testMain, jetstream.JetStream) {
	url := natstest.Start(t).URL()
	hs := startDendrite(t, url)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	own, err := dendrite.Streamed(js)
	if err != nil {
		t.Fatal(err)
	}
	tm := startMainAt(t, now, "--nats-url", url, "--input", "matrix", "--source-stream", dendrite.Stream, "--stream", "CHAT_MATRIX")
	if err := dendrite.Sourced(js, own); err != nil {
		t.Fatal(err)
	}
	return hs, tm, js
}

// TestDendrite runs a real Matrix homeserver, Dendrite v0.13.8, against
// the test's NATS server, and chatpulse with --input matrix
// --source-stream on Dendrite's stream. Users registered through the
// client-server API create rooms, join, send messages, edit, react,
// redact, change their display name and leave; then every view of every
// window (overview, rooms, each room, each user: messages, distinct
// users, top talkers, series) equals the oracle fed the messages sent,
// with the ts Dendrite gave them, and Matrix ids show as they are through
// the HTTP API, however their path segment is escaped. The joins and
// leaves are in the oracle too (docs/contract.md section 12), each with
// the ts Dendrite gave its member event: every room's joins, leaves and
// series_joins are compared. A display name change is a member event of
// a user already joined, which the envelope cannot tell from a join
// (ingest/matrix.go): it is a repeated join, counted nowhere, while a
// member who left and comes back joins again.
func TestDendrite(t *testing.T) {
	clock := &following{}
	hs, tm, _ := startMatrix(t, clock.Now)
	users := map[string]matrixUser{}
	for _, name := range []string{"alice", "bob.smith", "carol", "dave_99"} {
		users[name] = hs.register(name)
	}
	alice, bob, carol, dave := users["alice"], users["bob.smith"], users["carol"], users["dave_99"]
	var evs []chat.Event
	// membership notes a member event of u in room, read with reader's
	// token once the room's state has it.
	membership := func(reader, u matrixUser, room string, kind chat.Kind, content func(map[string]any) bool) {
		ts := hs.memberTS(reader, room, u.ID, content)
		evs = append(evs, chat.Event{Room: room, User: u.ID, TS: ts, Kind: kind})
	}
	joined := func(c map[string]any) bool { return c["membership"] == "join" }
	general, random, side := hs.createRoom(alice, "general"), hs.createRoom(alice, "random"), hs.createRoom(bob, "side")
	members := map[string][]matrixUser{general: {alice, bob, carol, dave}, random: {alice, carol}, side: {bob, alice}}
	for room, us := range members {
		membership(us[0], us[0], room, chat.KindJoin, joined) // the creator's
		for _, u := range us[1:] {
			hs.join(u, room)
			membership(u, u, room, chat.KindJoin, joined)
		}
	}
	type sent struct {
		room, event string
		at          int // in evs
	}
	var msgs []sent
	by := map[string]matrixUser{}
	r := rand.New(rand.NewPCG(23, 24))
	rooms := []string{general, random, side}
	message := func(u matrixUser, room string, i int) {
		event := hs.send(u, room, "m.room.message", map[string]any{"msgtype": "m.text", "body": fmt.Sprintf("message %d <b>&amp;</b> é", i)})
		msgs = append(msgs, sent{room, event, len(evs)})
		evs = append(evs, chat.Event{Room: room, User: u.ID})
		by[event] = u
	}
	for i := range 60 {
		room := rooms[min(len(rooms)-1, int(r.ExpFloat64()))]
		us := members[room]
		message(us[min(len(us)-1, int(r.ExpFloat64()*1.5))], room, i)
	}
	// Edits, a reaction and a redaction are not new messages; the
	// redacted message stays counted.
	for _, m := range msgs[:3] {
		u := by[m.event]
		hs.send(u, m.room, "m.room.message", map[string]any{"msgtype": "m.text", "body": "* edited",
			"m.new_content": map[string]any{"msgtype": "m.text", "body": "edited"},
			"m.relates_to":  map[string]any{"rel_type": "m.replace", "event_id": m.event}})
	}
	hs.send(carol, msgs[5].room, "m.reaction", map[string]any{"m.relates_to": map[string]any{"rel_type": "m.annotation", "event_id": msgs[5].event, "key": "👍"}})
	hs.redact(by[msgs[4].event], msgs[4].room, msgs[4].event)
	rename := func(u matrixUser, name string, in ...string) {
		hs.call("PUT", "/_matrix/client/v3/profile/"+url.PathEscape(u.ID)+"/displayname", u.Token, map[string]any{"displayname": name}, nil)
		for _, room := range in { // a member event, membership "join", in each room of u
			membership(u, u, room, chat.KindJoin, func(c map[string]any) bool { return c["displayname"] == name })
		}
	}
	rename(alice, "Alice A.", rooms...)
	left := func(c map[string]any) bool { return c["membership"] == "leave" }
	hs.leave(dave, general)
	membership(alice, dave, general, chat.KindLeave, left)
	hs.leave(carol, random)
	membership(alice, carol, random, chat.KindLeave, left)
	hs.join(dave, general) // back: a join again
	membership(dave, dave, general, chat.KindJoin, joined)
	rename(dave, "Dave", general)
	message(bob, side, 60) // the last message: once it shows, everything before it has been read
	for _, m := range msgs {
		evs[m.at].TS = hs.ts(by[m.event], m.room, m.event)
	}

	var last aggregator.Room
	wait.For(t, 30*time.Second, func() error {
		tm.get("/api/v1/rooms/"+url.PathEscape(side)+"?window=1h", &last)
		if want := count(evs, side); last.Messages != want {
			return fmt.Errorf("%s shows %d messages, want %d", side, last.Messages, want)
		}
		return nil
	})
	now := time.Now().UnixMilli()
	clock.at.Store(now)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(now, evs)
	tm.compareAll(o, now, evs)
	// The oracle leaves the display name changes out (the rule of
	// docs/contract.md section 12); said outright: general's joins are
	// its four members' and dave's return, not the renames of alice and
	// dave.
	var g aggregator.Room
	tm.get("/api/v1/rooms/"+url.PathEscape(general)+"?window=1h", &g)
	if g.Joins != 5 || g.Leaves != 1 {
		t.Errorf("%s: %d joins, %d leaves; want 5 (4 members, one back), 1", general, g.Joins, g.Leaves)
	}

	// Matrix ids through the API, their path segment escaped in full or
	// not at all.
	var plain, escaped aggregator.Room
	tm.get("/api/v1/rooms/"+general+"?window=1h", &plain)
	tm.get("/api/v1/rooms/"+strings.NewReplacer("!", "%21", ":", "%3A", ".", "%2E").Replace(general)+"?window=1h", &escaped)
	if plain.Room != general || escaped.Room != general || plain.Messages != count(evs, general) || escaped.Messages != plain.Messages {
		t.Errorf("room %s: %+v, escaped %+v", general, plain, escaped)
	}
	var u aggregator.User
	tm.get("/api/v1/users/"+url.PathEscape(bob.ID)+"?window=1h", &u)
	if u.User != bob.ID {
		t.Errorf("user %s shows as %q", bob.ID, u.User)
	}
	var check struct{ Allowed *bool }
	if status := tm.post("/api/v1/throttle/check", fmt.Sprintf(`{"room":%q,"user":%q,"text":"hi"}`, general, bob.ID), &check); status != http.StatusOK || check.Allowed == nil {
		t.Errorf("a throttle check with Matrix ids: status %d, %+v", status, check)
	}

	// What was read and not counted: the edits, the reaction, the
	// redaction, the rooms' state. Nothing was rejected.
	for _, reason := range []string{"malformed", "invalid", "unmapped", "too_large", "late", "future"} {
		if got := tm.metric(`chatpulse_events_rejected_total{reason="` + reason + `"}`); got != 0 {
			t.Errorf("rejected %s: %v", reason, got)
		}
	}
	received, ignored := tm.metric("chatpulse_events_received_total"), tm.metric("chatpulse_events_ignored_total")
	if accepted := tm.metric("chatpulse_events_accepted_total"); accepted != float64(len(evs)) || received != accepted+ignored {
		t.Errorf("received %v, accepted %v (want %d), ignored %v", received, accepted, len(evs), ignored)
	}
	t.Logf("%d room events read: %d messages, joins and leaves counted, %v ignored", int(received), len(evs), ignored)
}

// count is the messages of room in evs.
func count(evs []chat.Event, room string) int64 {
	n := int64(0)
	for _, e := range evs {
		if e.Room == room && e.Kind == chat.KindMessage {
			n++
		}
	}
	return n
}

// memberTS waits until room's state, as reader sees it, holds a member
// event of user whose content satisfies want, and returns its
// origin_server_ts.
func (hs *homeserver) memberTS(reader matrixUser, room, user string, want func(map[string]any) bool) int64 {
	hs.t.Helper()
	var ts int64
	wait.For(hs.t, 30*time.Second, func() error {
		var out struct {
			Chunk []struct {
				StateKey string         `json:"state_key"`
				TS       int64          `json:"origin_server_ts"`
				Content  map[string]any `json:"content"`
			} `json:"chunk"`
		}
		hs.call("GET", dendrite.RoomPath(room)+"/members", reader.Token, nil, &out)
		for _, e := range out.Chunk {
			if e.StateKey == user && want(e.Content) {
				ts = e.TS
				return nil
			}
		}
		return fmt.Errorf("%s has no such member event of %s yet", room, user)
	})
	return ts
}
