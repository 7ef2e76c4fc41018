package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/rolling"
)

// dendriteInstall is how .ci/run and docs/input.md install Dendrite.
const dendriteInstall = "go install github.com/matrix-org/dendrite/cmd/dendrite@v0.13.8 " +
	"github.com/matrix-org/dendrite/cmd/generate-config@v0.13.8 github.com/matrix-org/dendrite/cmd/generate-keys@v0.13.8"

// dendriteTools finds Dendrite's commands on PATH or in Go's install
// directory. Without them the test skips, unless CI=true: then it fails,
// as the other tests that need a tool do.
func dendriteTools(t *testing.T) (dendrite, generateConfig, generateKeys string) {
	t.Helper()
	dirs := []string{""}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 {
			dirs = append(dirs, lines[0], filepath.Join(lines[1], "bin"))
		}
	}
	find := func(name string) string {
		for _, dir := range dirs {
			p := name
			if dir != "" {
				p = filepath.Join(dir, name)
			}
			if p, err := exec.LookPath(p); err == nil {
				return p
			}
		}
		return ""
	}
	dendrite, generateConfig, generateKeys = find("dendrite"), find("generate-config"), find("generate-keys")
	if dendrite == "" || generateConfig == "" || generateKeys == "" {
		msg := "Dendrite is not installed (" + dendriteInstall + "): a real Matrix homeserver is needed here"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true, so this is a failure")
		}
		t.Skip(msg + "; skipping")
	}
	return dendrite, generateConfig, generateKeys
}

// homeserver is a Dendrite run for a test, its JetStream on the test's
// NATS server, and a client of its client-server API.
type homeserver struct {
	t      *testing.T
	url    string
	secret string // of registration by shared secret
	txn    atomic.Int64
}

// startDendrite runs Dendrite against natsURL until the test ends, as
// docs/input.md sets it up: generate-keys, generate-config, and
// global.jetstream.addresses pointing at the NATS server (with TLS
// validation off: generate-config's true makes it demand TLS from a plain
// server). Federation, server notices, rate limits and most logs are off,
// and passwords are hashed cheaply, for a quick test.
func startDendrite(t *testing.T, natsURL string) *homeserver {
	t.Helper()
	dendrite, generateConfig, generateKeys := dendriteTools(t)
	dir := t.TempDir()
	run := func(name string, args ...string) []byte {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out
	}
	run(generateKeys, "--private-key", filepath.Join(dir, "matrix_key.pem"))
	var cfg map[string]any
	if err := yaml.Unmarshal(run(generateConfig, "-dir", dir), &cfg); err != nil {
		t.Fatal(err)
	}
	hs := &homeserver{t: t, secret: "chatpulse-test"}
	section := func(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }
	global := section(cfg, "global")
	global["private_key"] = filepath.Join(dir, "matrix_key.pem")
	global["disable_federation"] = true
	section(global, "server_notices")["enabled"] = false
	js := section(global, "jetstream")
	js["addresses"] = []string{natsURL}
	js["disable_tls_validation"] = false
	client := section(cfg, "client_api")
	client["registration_shared_secret"] = hs.secret
	section(client, "rate_limiting")["enabled"] = false
	section(cfg, "user_api")["bcrypt_cost"] = 4
	cfg["logging"] = []map[string]any{{"type": "std", "level": "error"}}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "dendrite.yaml")
	if err := os.WriteFile(config, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	hs.url = "http://" + addr
	cmd := exec.Command(dendrite, "--config", config, "--http-bind-address", addr)
	cmd.Dir = dir
	log := &syncBuffer{t: t}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	wait.For(t, 60*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("dendrite exited: %v\n%s", err, log.String())
		default:
		}
		resp, err := http.Get(hs.url + "/_matrix/client/versions")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("dendrite: /_matrix/client/versions: %s", resp.Status)
		}
		return nil
	})
	return hs
}

// call makes one client-server API request and decodes its answer into
// out.
func (hs *homeserver) call(method, path, token string, body, out any) {
	hs.t.Helper()
	var in io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		in = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, hs.url+path, in)
	if err != nil {
		hs.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		hs.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		hs.t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			hs.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// matrixUser is a registered user and its access token.
type matrixUser struct{ id, token string }

// register makes an account by the shared secret (Synapse's admin API,
// which Dendrite serves) and returns it logged in.
func (hs *homeserver) register(name string) matrixUser {
	hs.t.Helper()
	var nonce struct{ Nonce string }
	hs.call("GET", "/_synapse/admin/v1/register", "", nil, &nonce)
	password := "pw-" + name
	mac := hmac.New(sha1.New, []byte(hs.secret))
	mac.Write([]byte(nonce.Nonce + "\x00" + name + "\x00" + password + "\x00notadmin"))
	var out struct {
		UserID      string `json:"user_id"`
		AccessToken string `json:"access_token"`
	}
	hs.call("POST", "/_synapse/admin/v1/register", "", map[string]any{
		"nonce": nonce.Nonce, "username": name, "password": password, "admin": false, "mac": hex.EncodeToString(mac.Sum(nil)),
	}, &out)
	return matrixUser{out.UserID, out.AccessToken}
}

func roomPath(room string) string { return "/_matrix/client/v3/rooms/" + url.PathEscape(room) }

func (hs *homeserver) createRoom(u matrixUser, name string) string {
	var out struct {
		RoomID string `json:"room_id"`
	}
	hs.call("POST", "/_matrix/client/v3/createRoom", u.token, map[string]any{"preset": "public_chat", "name": name}, &out)
	return out.RoomID
}

func (hs *homeserver) join(u matrixUser, room string) {
	hs.call("POST", "/_matrix/client/v3/join/"+url.PathEscape(room), u.token, map[string]any{}, nil)
}

func (hs *homeserver) leave(u matrixUser, room string) {
	hs.call("POST", roomPath(room)+"/leave", u.token, map[string]any{}, nil)
}

// send sends an event of type evType to room and returns its id once the
// homeserver has it.
func (hs *homeserver) send(u matrixUser, room, evType string, content map[string]any) string {
	var out struct {
		EventID string `json:"event_id"`
	}
	hs.call("PUT", fmt.Sprintf("%s/send/%s/t%d", roomPath(room), evType, hs.txn.Add(1)), u.token, content, &out)
	return out.EventID
}

func (hs *homeserver) redact(u matrixUser, room, event string) {
	hs.call("PUT", fmt.Sprintf("%s/redact/%s/t%d", roomPath(room), url.PathEscape(event), hs.txn.Add(1)), u.token, map[string]any{"reason": "test"}, nil)
}

// ts is the origin_server_ts the homeserver gave an event.
func (hs *homeserver) ts(u matrixUser, room, event string) int64 {
	var out struct {
		TS int64 `json:"origin_server_ts"`
	}
	hs.call("GET", roomPath(room)+"/event/"+url.PathEscape(event), u.token, nil, &out)
	return out.TS
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
	ctx := context.Background()
	dendriteConsumers := 0
	wait.For(t, 30*time.Second, func() error {
		s, err := js.Stream(ctx, "DendriteOutputRoomEvent")
		if err != nil {
			return fmt.Errorf("Dendrite's stream: %w", err)
		}
		dendriteConsumers = s.CachedInfo().State.Consumers
		return nil
	})
	tm := startMainAt(t, now, "--nats-url", url, "--input", "matrix", "--source-stream", "DendriteOutputRoomEvent", "--stream", "CHAT_MATRIX")
	wait.For(t, 30*time.Second, func() error {
		s, err := js.Stream(ctx, "DendriteOutputRoomEvent")
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Consumers; n <= dendriteConsumers {
			return fmt.Errorf("Dendrite's stream has %d consumers, as before chatpulse: not sourced yet", n)
		}
		return nil
	})
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
		ts := hs.memberTS(reader, room, u.id, content)
		evs = append(evs, chat.Event{Room: room, User: u.id, TS: ts, Kind: kind})
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
		evs = append(evs, chat.Event{Room: room, User: u.id})
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
		hs.call("PUT", "/_matrix/client/v3/profile/"+url.PathEscape(u.id)+"/displayname", u.token, map[string]any{"displayname": name}, nil)
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
	tm.get("/api/v1/users/"+url.PathEscape(bob.id)+"?window=1h", &u)
	if u.User != bob.id {
		t.Errorf("user %s shows as %q", bob.id, u.User)
	}
	var check struct{ Allowed *bool }
	if status := tm.post("/api/v1/throttle/check", fmt.Sprintf(`{"room":%q,"user":%q,"text":"hi"}`, general, bob.id), &check); status != http.StatusOK || check.Allowed == nil {
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
		hs.call("GET", roomPath(room)+"/members", reader.token, nil, &out)
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

// TestDendriteLatency measures, against a real Dendrite, the time from a
// client's send returning to the message showing in its room's view (GET
// /api/v1/rooms/{room}, polled every 0.2 ms meanwhile), one message at a
// time, and logs its percentiles: negative when it showed first. It is a measurement, asserting nothing about
// time, and runs only when asked for with CHATPULSE_DENDRITE_LATENCY=N
// (messages):
//
//	CHATPULSE_DENDRITE_LATENCY=300 go test -run=TestDendriteLatency -v ./cmd/chatpulse/
func TestDendriteLatency(t *testing.T) {
	n := 0
	fmt.Sscan(os.Getenv("CHATPULSE_DENDRITE_LATENCY"), &n)
	if n <= 0 {
		t.Skip("set CHATPULSE_DENDRITE_LATENCY=300 to measure")
	}
	hs, tm, _ := startMatrix(t, nil)
	alice := hs.register("alice")
	room := hs.createRoom(alice, "latency")
	path := "/api/v1/rooms/" + url.PathEscape(room) + "?window=1h"
	client := &http.Client{}
	messages := func() int64 {
		resp, err := client.Get(tm.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v aggregator.Room
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v.Messages
	}
	// A poller notes when the view first shows each count, while the
	// sends go one after another: a message can show before its send
	// returns (Dendrite publishes it before it answers).
	shown := make([]time.Time, n+1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seen := int64(0); seen < int64(n); {
			m := min(messages(), int64(n))
			for ; seen < m; seen++ {
				shown[seen+1] = time.Now()
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	started, returned := make([]time.Time, n+1), make([]time.Time, n+1)
	for i := 1; i <= n; i++ {
		started[i] = time.Now()
		hs.send(alice, room, "m.room.message", map[string]any{"msgtype": "m.text", "body": fmt.Sprintf("message %d", i)})
		returned[i] = time.Now()
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not every message showed within 30s")
	}
	after, whole, before := make([]time.Duration, 0, n), make([]time.Duration, 0, n), 0
	for i := 1; i <= n; i++ {
		after, whole = append(after, shown[i].Sub(returned[i])), append(whole, shown[i].Sub(started[i]))
		if shown[i].Before(returned[i]) {
			before++
		}
	}
	pct := func(lat []time.Duration, p float64) time.Duration {
		slices.Sort(lat)
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	t.Logf("%d messages, one at a time. Send returned -> shown in the room view: p50 %v, p99 %v, max %v (%d of %d shown before the send returned). "+
		"Send started -> shown: p50 %v, p99 %v, max %v",
		n, pct(after, 0.50), pct(after, 0.99), pct(after, 1), before, n, pct(whole, 0.50), pct(whole, 0.99), pct(whole, 1))
}
