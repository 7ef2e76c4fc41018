package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/act"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/group"
	"github.com/chatpulse/chatpulse/internal/dendrite"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// actPolicies mute and redact a flood of more than 3 messages in 3 s,
// for 3 s at least, and lock a room against more than 2 joins a minute,
// for 3 s after the wave.
const actPolicies = `policies:
  - name: user_room_flood
    scope: user_in_room
    algorithm: sliding_window
    limit: 3
    window: 3s
    penalty: 3s
    act: [mute, redact]
  - name: raid
    scope: room
    algorithm: join_wave
    limit: 2
    window: 1m
    act: [lock]
    lock_for: 3s
`

// actRoom is Dendrite, a room its bot made, the users, a moderator, and
// the NATS server they share.
type actRoom struct {
	hs    *homeserver
	url   string // NATS
	js    jetstream.JetStream
	own   int // Dendrite's own consumers of its stream
	bot   matrixUser
	mod   matrixUser
	users map[string]matrixUser
	room  string
	// The flags of chatpulse acting there.
	args []string
}

func newActRoom(t *testing.T) *actRoom { return newActRoomWith(t, actPolicies) }

// newActRoomWith is newActRoom with chatpulse's policies file holding
// policies.
func newActRoomWith(t *testing.T, policies string) *actRoom {
	t.Helper()
	r := &actRoom{url: natstest.Start(t).URL(), users: map[string]matrixUser{}}
	r.hs = startDendrite(t, r.url)
	nc, err := nats.Connect(r.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r.js, _ = jetstream.New(nc)
	if r.own, err = dendrite.Streamed(r.js); err != nil {
		t.Fatal(err)
	}
	r.bot = r.hs.register("chatpulse")
	r.room = r.hs.createRoom(r.bot, "lobby")
	for _, name := range []string{"mod", "alice", "carol", "dave", "erin", "frank"} {
		r.users[name] = r.hs.register(name)
	}
	r.mod = r.users["mod"]
	for _, name := range []string{"mod", "alice"} {
		r.hs.join(r.users[name], r.room)
	}
	var pl map[string]any
	r.hs.call("GET", dendrite.RoomPath(r.room)+"/state/m.room.power_levels/", r.bot.Token, nil, &pl)
	pl["users"].(map[string]any)[r.mod.ID] = 50 // the room's own moderator
	r.hs.call("PUT", dendrite.RoomPath(r.room)+"/state/m.room.power_levels/", r.bot.Token, pl, nil)
	dir := t.TempDir()
	token, file := filepath.Join(dir, "token"), filepath.Join(dir, "policies.yaml")
	os.WriteFile(token, []byte(r.bot.Token+"\n"), 0o600)
	os.WriteFile(file, []byte(policies), 0o644)
	r.args = []string{"--nats-url", r.url, "--input", "matrix", "--source-stream", dendrite.Stream, "--stream", "CHAT_MATRIX",
		"--policies", file, "--act", "matrix", "--matrix-homeserver", r.hs.URL, "--matrix-token-file", token}
	return r
}

// sourced waits until chatpulse's stream sources Dendrite's (before any
// room event of the test: Dendrite's stream keeps nothing nobody wants).
func (r *actRoom) sourced(t *testing.T) {
	t.Helper()
	if err := dendrite.Sourced(r.js, r.own); err != nil {
		t.Fatal(err)
	}
}

// say has name send n messages, as fast as the homeserver takes them,
// and returns the ids of those it took: a user muted meanwhile can post
// no more (chatpulse may well act before the burst is over).
func (r *actRoom) say(name string, n int) []string {
	var ids []string
	for i := range n {
		id, err := r.hs.Send(r.users[name], r.room, "m.room.message", map[string]any{"msgtype": "m.text", "body": fmt.Sprint(name, " says ", i)})
		if err != nil {
			break
		}
		ids = append(ids, id)
	}
	return ids
}

// canSend reports whether user may post in the room now.
func (r *actRoom) canSend(name string) bool {
	_, err := r.hs.Send(r.users[name], r.room, "m.room.message", map[string]any{"msgtype": "m.text", "body": "may I?"})
	return err == nil
}

func (r *actRoom) redacted(t *testing.T, event string) bool {
	var ev struct {
		Unsigned struct {
			RedactedBecause any `json:"redacted_because"`
		} `json:"unsigned"`
	}
	r.hs.call("GET", dendrite.RoomPath(r.room)+"/event/"+url.PathEscape(event), r.bot.Token, nil, &ev)
	return ev.Unsigned.RedactedBecause != nil
}

func (r *actRoom) level(name string) (int, bool) {
	var pl struct{ Users map[string]int }
	r.hs.call("GET", dendrite.RoomPath(r.room)+"/state/m.room.power_levels/", r.bot.Token, nil, &pl)
	l, ok := pl.Users[r.users[name].ID]
	return l, ok
}

func (r *actRoom) joinRule() string {
	var jr struct {
		JoinRule string `json:"join_rule"`
	}
	r.hs.call("GET", dendrite.RoomPath(r.room)+"/state/m.room.join_rules/", r.bot.Token, nil, &jr)
	return jr.JoinRule
}

// heard collects what chatpulse publishes on chatpulse.act.>.
type heard struct {
	mu   sync.Mutex
	acts []act.Act
}

func hear(t *testing.T, natsURL string) *heard {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h := &heard{}
	nc.Subscribe("chatpulse.act.>", func(m *nats.Msg) {
		var a act.Act
		if json.Unmarshal(m.Data, &a) == nil {
			h.mu.Lock()
			h.acts = append(h.acts, a)
			h.mu.Unlock()
		}
	})
	nc.Flush()
	return h
}

func (h *heard) of(k act.Kind, user string) []act.Act {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []act.Act
	for _, a := range h.acts {
		if a.Kind == k && (user == "" || a.User == user) {
			out = append(out, a)
		}
	}
	return out
}

// chatpulse, reading a real Dendrite's bus with --act matrix, acts on
// the room as docs/contract.md section 14 says, checked through the
// client-server API only: a flooder is muted while the policy denies
// them and exactly unmuted after; each of their messages from the
// crossing on is redacted, none before; the room's moderator who floods
// is neither muted nor redacted; a join wave locks the room, which is
// unlocked as it was lock_for later. Every act is published with the
// homeserver's event id, and GET /api/v1/act lists the undos due.
func TestActEndToEnd(t *testing.T) {
	r := newActRoom(t)
	h := hear(t, r.url)
	tm := startMain(t, r.args...)
	r.sourced(t)

	alice, mod := r.say("alice", 6), r.say("mod", 6)
	if len(alice) < 4 || len(mod) != 6 {
		t.Fatalf("alice posted %d messages, the moderator %d; want 4 at least (a flood) and 6", len(alice), len(mod))
	}
	aliceID := r.users["alice"].ID
	// A homeserver may take a message that races the mute, then drop it
	// (soft-failed): it never reaches the bus, nor the room. Those that
	// reached the bus are what chatpulse counts.
	var seen int64
	wait.For(t, 30*time.Second, func() error {
		var v struct{ Messages int64 }
		tm.get("/api/v1/users/"+url.PathEscape(aliceID)+"?window=1m", &v)
		seen = v.Messages
		if m, rd := h.of(act.Mute, aliceID), h.of(act.Redact, aliceID); len(m) != 1 || m[0].Event == "" || int64(len(rd)) != seen-3 {
			return fmt.Errorf("heard mutes %+v and %d redactions of the %d of alice's %d messages that reached the bus", m, len(rd), seen, len(alice))
		}
		return nil
	})
	alice = alice[:seen]
	if m := h.of(act.Mute, aliceID)[0]; len(m.Answered) != 1 || m.Answered[0] != alice[3] || m.Policy != "user_room_flood" || m.Until == nil {
		t.Errorf("alice's mute: %+v; want it to answer her 4th message, until the penalty's end", m)
	}
	// The audit trail keeps it.
	logged, err := r.js.Stream(t.Context(), bus.ModerationLogStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := logged.Info(t.Context(), jetstream.WithSubjectFilter(bus.ActPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.State.Subjects[bus.ActPrefix+"mute"], uint64(len(h.of(act.Mute, ""))); got != want {
		t.Errorf("the audit stream keeps %d mutes, %d were published", got, want)
	}
	if l, ok := r.level("alice"); !ok || l != -1 {
		t.Errorf("alice's level while muted: %d (%v), want -1", l, ok)
	}
	if r.canSend("alice") {
		t.Error("alice can post while muted")
	}
	for i, ev := range alice {
		if got, want := r.redacted(t, ev), i >= 3; got != want {
			t.Errorf("alice's message %d redacted: %v, want %v", i, got, want)
		}
	}
	var st act.Status
	tm.get("/api/v1/act", &st)
	doc := loadOpenAPI(t, tm.url+"/api/v1/openapi.json")
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	(&apiValidator{t: t, router: router, seen: map[string]bool{}}).check(tm.url, apiCase{"GET", "/api/v1/act", "", 200, ""})
	if st.Mode != act.ModeAct || len(st.Pending) != 1 || st.Pending[0].Kind != act.Unmute || st.Pending[0].User != aliceID {
		t.Errorf("GET /api/v1/act: %+v", st)
	}
	if m := h.of(act.Mute, r.mod.ID); len(m) != 1 || m[0].Skipped != "moderator" {
		t.Errorf("the moderator's mute: %+v, want one, skipped as a moderator", m)
	}
	for i, ev := range mod {
		if r.redacted(t, ev) {
			t.Errorf("the moderator's message %d redacted", i)
		}
	}

	wait.For(t, 30*time.Second, func() error {
		if u := h.of(act.Unmute, aliceID); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("heard unmutes %+v", u)
		}
		return nil
	})
	if l, ok := r.level("alice"); ok {
		t.Errorf("alice's level after her unmute: %d; want no entry, as before", l)
	}
	if !r.canSend("alice") {
		t.Error("alice cannot post once unmuted")
	}

	for _, name := range []string{"carol", "dave", "erin"} {
		r.hs.join(r.users[name], r.room)
	}
	wait.For(t, 30*time.Second, func() error {
		if l := h.of(act.Lock, ""); len(l) != 1 || l[0].Event == "" {
			return fmt.Errorf("heard locks %+v", l)
		}
		return nil
	})
	if rule := r.joinRule(); rule != "invite" {
		t.Errorf("join rule while locked: %s", rule)
	}
	if err := r.hs.Join(r.users["frank"], r.room); err == nil {
		t.Error("frank joined a locked room")
	}
	wait.For(t, 30*time.Second, func() error {
		if u := h.of(act.Unlock, ""); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("heard unlocks %+v", u)
		}
		return nil
	})
	if rule := r.joinRule(); rule != "public" {
		t.Errorf("join rule after the lock: %s, want public, as before", rule)
	}
	r.hs.join(r.users["frank"], r.room)
}

// --act-mode shadow decides, publishes and audits what it would do, and
// changes nothing on the homeserver.
func TestActShadow(t *testing.T) {
	r := newActRoom(t)
	h := hear(t, r.url)
	startMain(t, append(r.args, "--act-mode", "shadow")...)
	r.sourced(t)
	alice := r.say("alice", 5)
	if len(alice) != 5 {
		t.Fatalf("alice posted %d of 5 messages: shadow mode muted her", len(alice))
	}
	aliceID := r.users["alice"].ID
	wait.For(t, 30*time.Second, func() error {
		if m, rd := h.of(act.Mute, aliceID), h.of(act.Redact, aliceID); len(m) != 1 || !m[0].Shadow || len(rd) != 2 {
			return fmt.Errorf("heard mutes %+v and %d redactions", m, len(rd))
		}
		return nil
	})
	if _, ok := r.level("alice"); ok || !r.canSend("alice") {
		t.Error("shadow mode muted alice")
	}
	for i, ev := range alice {
		if r.redacted(t, ev) {
			t.Errorf("shadow mode redacted alice's message %d", i)
		}
	}
	wait.For(t, 30*time.Second, func() error {
		if u := h.of(act.Unmute, aliceID); len(u) != 1 || !u[0].Shadow {
			return fmt.Errorf("heard unmutes %+v", u)
		}
		return nil
	})
}

// Bad acting flags are usage errors at start that name what is wrong: a
// missing or empty token file, --act without --input matrix, a policy
// that names an act its algorithm cannot do (named with its field). A
// homeserver that does not answer at start is not: chatpulse starts,
// says so, and asks again.
func TestActFlags(t *testing.T) {
	dir := t.TempDir()
	token, empty, badPolicy := filepath.Join(dir, "token"), filepath.Join(dir, "empty"), filepath.Join(dir, "bad.yaml")
	os.WriteFile(token, []byte("syt_secret\n"), 0o600)
	os.WriteFile(empty, []byte(" \n"), 0o600)
	os.WriteFile(badPolicy, []byte("policies:\n  - name: flood\n    scope: user\n    algorithm: sliding_window\n    limit: 5\n    window: 10s\n    act: [lock]\n"), 0o644)
	matrix := []string{"--input", "matrix", "--act", "matrix", "--matrix-homeserver", "http://127.0.0.1:1"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no input matrix":    {[]string{"--act", "matrix", "--matrix-homeserver", "http://h", "--matrix-token-file", token}, "--act matrix: chatpulse acts on the homeserver whose events it reads: needs --input matrix"},
		"unknown act":        {[]string{"--act", "irc"}, `--act: matrix, or nothing; got "irc"`},
		"no homeserver":      {[]string{"--input", "matrix", "--act", "matrix", "--matrix-token-file", token}, "--act matrix: needs --matrix-homeserver"},
		"no token file":      {matrix, "--act matrix: needs --matrix-token-file"},
		"missing token file": {append(matrix, "--matrix-token-file", filepath.Join(dir, "none")), "--matrix-token-file: open " + filepath.Join(dir, "none") + ": no such file or directory"},
		"empty token file":   {append(matrix, "--matrix-token-file", empty), "--matrix-token-file: " + empty + ": empty"},
		"bad homeserver":     {[]string{"--input", "matrix", "--act", "matrix", "--matrix-homeserver", "ftp://h", "--matrix-token-file", token}, "--matrix-homeserver: "},
		"bad mode":           {append(matrix, "--matrix-token-file", token, "--act-mode", "loud"), `--act-mode: act or shadow, got "loud"`},
		"without --act":      {[]string{"--matrix-homeserver", "http://h"}, "--matrix-homeserver: only with --act matrix"},
	} {
		m := NewMain()
		err := m.ParseFlags(tc.args, func(string) string { return "" })
		var usage *UsageError
		if !errors.As(err, &usage) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a usage error starting %q", name, err, tc.want)
		}
	}
	// A policy that names an act its algorithm cannot do: refused at
	// start, naming the policy and the field.
	m := NewMain()
	if err := m.ParseFlags([]string{"--policies", badPolicy, "--http", "127.0.0.1:0", "--data-dir", t.TempDir(), "--nats-listen", "127.0.0.1:0"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	err := m.Run(t.Context())
	m.Close()
	if want := badPolicy + ":7: policies[0].act[0]: only a join_wave locks a room"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a policy that cannot lock: %v, want %q", err, want)
	}

	// A homeserver that does not answer: chatpulse runs, and says so.
	tm := startMain(t, append(matrix, "--matrix-token-file", token)...)
	wait.For(t, 10*time.Second, func() error {
		if !strings.Contains(tm.log.String(), "act: the homeserver does not answer; chatpulse runs and asks again") {
			return errors.New("no word of the homeserver not answering yet")
		}
		return nil
	})
	if strings.Contains(tm.log.String(), "syt_secret") {
		t.Error("the bot's token is in the log")
	}
}

// Moderators' actions act too: a timeout mutes the user until it ends,
// or until it is lifted; under slow mode each message slow mode would
// have denied is redacted.
func TestActModeratorsActions(t *testing.T) {
	r := newActRoomWith(t, "policies: []\n") // the moderators' actions alone
	h := hear(t, r.url)
	tm := startMain(t, r.args...)
	r.sourced(t)
	alice := r.users["alice"]
	timeout := "/api/v1/users/" + url.PathEscape(alice.ID) + "/timeout"

	if code := tm.put(timeout, fmt.Sprintf(`{"room":%q,"for":"3s","actor":"mod"}`, r.room), nil); code != 200 {
		t.Fatalf("timeout: %d", code)
	}
	wait.For(t, 30*time.Second, func() error {
		if m := h.of(act.Mute, alice.ID); len(m) != 1 || m[0].Event == "" || m[0].Policy != "timeout" {
			return fmt.Errorf("heard mutes %+v", m)
		}
		return nil
	})
	if r.canSend("alice") {
		t.Error("alice can post while timed out")
	}
	wait.For(t, 30*time.Second, func() error { // the timeout ends
		if u := h.of(act.Unmute, alice.ID); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("heard unmutes %+v", u)
		}
		return nil
	})
	if _, ok := r.level("alice"); ok || !r.canSend("alice") {
		t.Error("alice is still muted once her timeout ended")
	}

	// A timeout without an end holds until it is lifted.
	if code := tm.put(timeout, fmt.Sprintf(`{"room":%q}`, r.room), nil); code != 200 {
		t.Fatalf("timeout: %d", code)
	}
	wait.For(t, 30*time.Second, func() error {
		if m := h.of(act.Mute, alice.ID); len(m) != 2 || m[1].Event == "" {
			return fmt.Errorf("heard mutes %+v", m)
		}
		return nil
	})
	var st act.Status
	tm.get("/api/v1/act", &st)
	if len(st.Pending) != 1 || st.Pending[0].Due != nil {
		t.Errorf("pending: %+v; want alice's unmute, when the timeout is lifted", st.Pending)
	}
	if resp := tm.do("DELETE", timeout+"?room="+url.QueryEscape(r.room), ""); resp.StatusCode != 200 {
		t.Fatalf("lift: %s", resp.Status)
	}
	wait.For(t, 30*time.Second, func() error {
		if u := h.of(act.Unmute, alice.ID); len(u) != 2 || u[1].Event == "" {
			return fmt.Errorf("heard unmutes %+v", u)
		}
		return nil
	})
	if !r.canSend("alice") {
		t.Error("alice cannot post once her timeout was lifted")
	}

	// Slow mode: alice's second message within the interval is redacted,
	// her first and the moderator's are not.
	if code := tm.put("/api/v1/rooms/"+url.PathEscape(r.room)+"/slowmode", `{"interval":"1m","for":"5m"}`, nil); code != 200 {
		t.Fatalf("slow mode: %d", code)
	}
	msgs := r.say("alice", 2)
	mod := r.say("mod", 2)
	wait.For(t, 30*time.Second, func() error {
		if rd := h.of(act.Redact, alice.ID); len(rd) != 1 || rd[0].Answered[0] != msgs[1] || rd[0].Policy != "slowmode" {
			return fmt.Errorf("heard redactions %+v", rd)
		}
		return nil
	})
	if r.redacted(t, msgs[0]) || !r.redacted(t, msgs[1]) || r.redacted(t, mod[1]) {
		t.Error("slow mode redacted the wrong messages")
	}
}

// In a group of two, each act is done once for the group, by the member
// that holds the room's partition; killed (SIGKILL) in the middle of a
// penalty, it leaves the mute's undo to the other, which takes the
// partition over and unmutes once, when due.
func TestActGroupSurvivesAKill(t *testing.T) {
	r := newActRoomWith(t, strings.Replace(actPolicies, "penalty: 3s", "penalty: 10s", 1))
	h := hear(t, r.url)
	args := append([]string{"--group", "g", "--partitions", "8", "--snapshot-interval", "1s"}, r.args...)
	m0, tm0 := startBinary(t, append(args, "--instance", "m0")...)
	m1, tm1 := startBinary(t, append(args, "--instance", "m1")...)
	waitComplete(t, tm0, 2)
	r.sourced(t)

	// Who holds the room's partition: its member acts.
	p := group.Partition(chat.Token(r.room), 8)
	var st struct {
		Members []struct {
			Instance   string `json:"instance"`
			Partitions []int  `json:"partitions"`
		} `json:"members"`
	}
	tm0.get("/api/v1/group", &st)
	owner, survivor := m0, tm1
	for _, m := range st.Members {
		if slices.Contains(m.Partitions, p) && m.Instance == "m1" {
			owner, survivor = m1, tm0
		}
	}

	alice := r.say("alice", 6)
	aliceID := r.users["alice"].ID
	wait.For(t, 30*time.Second, func() error {
		if m := h.of(act.Mute, aliceID); len(m) != 1 || m[0].Event == "" {
			return fmt.Errorf("heard mutes %+v", m)
		}
		return nil
	})
	owner.Process.Kill() // SIGKILL, its mute due in 10 s
	owner.Wait()
	if r.canSend("alice") {
		t.Error("alice can post while muted")
	}
	wait.For(t, 60*time.Second, func() error {
		if u := h.of(act.Unmute, aliceID); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("heard unmutes %+v", u)
		}
		return nil
	})
	if l, ok := r.level("alice"); ok {
		t.Errorf("alice's level after the survivor's unmute: %d; want no entry, as before", l)
	}
	if !r.canSend("alice") {
		t.Error("alice cannot post once unmuted")
	}
	// Each of her messages over the policy was redacted once, by one
	// member: the group acts once.
	seen := map[string]int{}
	for _, rd := range h.of(act.Redact, aliceID) {
		seen[rd.Answered[0]]++
	}
	for i, ev := range alice {
		if i >= 3 && seen[ev] > 1 || i < 3 && seen[ev] != 0 {
			t.Errorf("alice's message %d redacted %d times", i, seen[ev])
		}
	}
	if len(h.of(act.Mute, aliceID)) != 1 {
		t.Errorf("muted %d times", len(h.of(act.Mute, aliceID)))
	}
	if n := survivor.metric(`chatpulse_acts_total{kind="unmute",result="done"}`); n != 1 {
		t.Errorf("the survivor unmuted %v times, want once", n)
	}
}

// Killed (SIGKILL) in the middle of a penalty, a standalone chatpulse
// unmutes once when it comes back: the undo was kept before the mute.
func TestActSurvivesAKill(t *testing.T) {
	r := newActRoomWith(t, strings.Replace(actPolicies, "penalty: 3s", "penalty: 6s", 1))
	h := hear(t, r.url)
	victim, _ := startBinary(t, r.args...)
	r.sourced(t)
	r.say("alice", 5)
	aliceID := r.users["alice"].ID
	wait.For(t, 30*time.Second, func() error {
		if m := h.of(act.Mute, aliceID); len(m) != 1 || m[0].Event == "" {
			return fmt.Errorf("heard mutes %+v", m)
		}
		return nil
	})
	victim.Process.Kill()
	victim.Wait()
	_, back := startBinary(t, r.args...)
	wait.For(t, 60*time.Second, func() error {
		if u := h.of(act.Unmute, aliceID); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("heard unmutes %+v", u)
		}
		return nil
	})
	if _, ok := r.level("alice"); ok || !r.canSend("alice") {
		t.Error("alice is still muted after the restart's unmute")
	}
	if n := back.metric(`chatpulse_acts_total{kind="mute",result="done"}`); n != 0 {
		t.Errorf("the restart muted again %v times: the replay acted on what was acted on", n)
	}
}
