package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

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
	Instance   string `json:"instance"`
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
	wait.For(t, 30*time.Second, func() error {
		st = groupStatus{}
		tm.get("/api/v1/group", &st)
		if !st.Complete || len(st.Members) != n {
			return fmt.Errorf("%s sees %d members, complete %v; want a complete group of %d", tm.url, len(st.Members), st.Complete, n)
		}
		return nil
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
	call := time.Now().UnixNano() // each publish's id is this call's and its index
	for i, e := range evs {
		subject := "chat." + chat.Token(e.Room) + "." + chat.Token(e.User)
		// As a chat server would, it publishes again while the stream
		// has no leader (a node lost); the stream's duplicate window
		// keeps each event once.
		msg := &nats.Msg{Subject: subject, Data: []byte(eventJSON(e, i)), Header: nats.Header{"Nats-Msg-Id": {fmt.Sprint("publishGroup-", call, "-", i)}}}
		wait.For(t, 30*time.Second, func() error {
			_, err := js.PublishMsg(ctx, msg)
			return err
		})
	}
}

// sameGroupJSON reports whether a group's view, which must say it is
// complete, equals want (the oracle's standalone view) at its as_of.
func (tm *testMain) sameGroupJSON(path string, want func(asOf int64) any) (bool, string) {
	var got map[string]any
	if status := tm.get(path, &got); status != http.StatusOK {
		tm.t.Fatalf("GET %s: status %d: %v", path, status, got)
	}
	g, _ := json.Marshal(got)
	if tm.grouped && (got["complete"] != true || got["missing_partitions"] != float64(0)) {
		return false, string(g)
	}
	delete(got, "complete")
	delete(got, "missing_partitions")
	var asOf chat.Time
	asOf.UnmarshalJSON(fmt.Appendf(nil, "%q", got["as_of"]))
	b, _ := json.Marshal(want(int64(asOf)))
	var w map[string]any
	json.Unmarshal(b, &w)
	return reflect.DeepEqual(got, w), fmt.Sprintf("got  %s\nwant %s", g, b)
}

// compareGroup checks every view of every window on tm against the oracle
// at the view's as_of, allowing the time it takes to catch up (a group
// member's views must also say they are complete).
func (tm *testMain) compareGroup(o *oracle.Oracle, evs []chat.Event) {
	tm.t.Helper()
	rooms, users := map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		rooms[e.Room], users[e.User] = true, true
	}
	check := func(path string, want func(int64) any) {
		tm.t.Helper()
		wait.For(tm.t, 30*time.Second, func() error {
			if ok, diff := tm.sameGroupJSON(path, want); !ok {
				return fmt.Errorf("GET %s on %s:\n%s", path, tm.url, diff)
			}
			return nil
		})
	}
	for _, w := range []string{"1m", "5m", "1h"} {
		check("/api/v1/overview?k=100&window="+w, func(t int64) any { return o.Overview(w, 100, t) })
		check("/api/v1/rooms?limit=1000&window="+w, func(t int64) any { return o.Rooms(w, 1000, t) })
		for room := range rooms {
			check("/api/v1/rooms/"+url.PathEscape(room)+"?k=100&window="+w, func(t int64) any { return o.Room(room, w, 100, t) })
		}
		for user := range users {
			check("/api/v1/users/"+url.PathEscape(user)+"?window="+w, func(t int64) any { return o.User(user, w, t) })
		}
	}
}

// groupTrace is a random trace with names that need escaping in
// subjects, and joins and leaves.
func groupTrace(seed uint64, now int64, n int) []chat.Event {
	r := rand.New(rand.NewPCG(seed, 3))
	evs := withJoins(r, randomTrace(r, now, n))
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
	url := natstest.Start(t).URL()
	clock := newFrozen()
	ms := startGroup(t, url, "g", 3, clock.Now)
	now := clock.ms.Load()
	evs := groupTrace(5, now, 2000)
	publishGroup(t, url, evs)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(now, evs)
	for _, tm := range ms {
		tm.compareGroup(o, evs)
	}
	// Over NATS, a view is answered for the whole group too.
	for _, body := range []string{`{"window":"1h","k":100}`, `{"window":"5m"}`} {
		got, code, desc := microView(t, ms[0].nc, "overview", body)
		var want any
		ms[2].get("/api/v1/overview?"+strings.NewReplacer(`{"window":"`, "window=", `","k":`, "&k=", `"}`, "", "}", "").Replace(body), &want)
		if code != "" || !reflect.DeepEqual(got, want) {
			t.Errorf("overview %s over NATS: %v %s %s, want %v", body, got, code, desc, want)
		}
	}
	st := waitComplete(t, ms[1], 3)
	owns := 0
	for _, m := range st.Members {
		owns += m.Owns
	}
	if owns != 8 || st.Partitions != 8 || st.Group != "g" || st.Instance != "m1" {
		t.Fatalf("status %+v", st)
	}
}

// startBinary runs the built chatpulse with args and waits for /readyz.
// What it logs goes to the test's log, and to tm.log.
func startBinary(t *testing.T, args ...string) (*exec.Cmd, *testMain) {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(buildBinary(t), append([]string{"--http", fmt.Sprint("127.0.0.1:", port)}, args...)...)
	log := &syncBuffer{t: t}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	tm := &testMain{t: t, url: fmt.Sprint("http://127.0.0.1:", port), grouped: slices.Contains(args, "--group"), log: log}
	tm.waitReady()
	return cmd, tm
}

// recentTrace is n events of the last 50 seconds, on the wall clock.
func recentTrace(seed uint64, n int) []chat.Event {
	r := rand.New(rand.NewPCG(seed, 9))
	now := time.Now().UnixMilli()
	evs := groupTrace(seed, now, n)
	for i := range evs {
		evs[i].TS = now - r.Int64N(50_000)
	}
	return evs
}

// A member killed with SIGKILL while events flow: the others say their
// views are incomplete until they own its partitions and have caught up,
// then answer exactly again; it comes back and takes its share without
// anyone counting twice.
func TestGroupFailover(t *testing.T) {
	url := natstest.Start(t).URL()
	// Snapshots every 200 ms: the survivors load the dead member's
	// partitions' snapshots and read only what came after.
	args := []string{"--nats-url", url, "--group", "g", "--partitions", "8", "--snapshot-interval", "200ms"}
	ms := []*testMain{startMain(t, append(args, "--instance", "m0")...), startMain(t, append(args, "--instance", "m1")...)}
	victim, vm := startBinary(t, append(args, "--instance", "m2")...)
	waitComplete(t, ms[0], 3)

	evs := recentTrace(7, 3000)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(time.Now().UnixMilli(), evs)
	published := make(chan struct{})
	go func() {
		defer close(published)
		publishGroup(t, url, evs)
	}()
	// Events are flowing once m2 has saved a snapshot (it saves only
	// partitions that handled something): the survivors then have one to
	// load for the partitions they take over.
	wait.For(t, 20*time.Second, func() error {
		if got := vm.metric("chatpulse_snapshot_bytes"); got <= 0 {
			return fmt.Errorf("m2 has saved no snapshot yet, with %v events received", vm.metric("chatpulse_events_received_total"))
		}
		return nil
	})
	select {
	case <-published:
		t.Log("every event was published before m2 was killed")
	default:
	}
	killed := time.Now()
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.Wait()
	sawIncomplete := false
	wait.For(t, 60*time.Second, func() error {
		var v map[string]any
		ms[0].get("/api/v1/overview", &v)
		sawIncomplete = sawIncomplete || v["complete"] == false
		var st groupStatus
		ms[0].get("/api/v1/group", &st)
		if !st.Complete || len(st.Members) != 2 {
			return fmt.Errorf("m0 sees %d members, complete %v; want the two survivors owning everything", len(st.Members), st.Complete)
		}
		return nil
	})
	t.Logf("from SIGKILL to a complete group of two: %v", time.Since(killed))
	if !sawIncomplete {
		t.Error("no view said it was incomplete while m2's partitions had no owner")
	}
	<-published
	for _, tm := range ms {
		tm.compareGroup(o, evs)
	}
	if ms[0].metric("chatpulse_restore_seconds")+ms[1].metric("chatpulse_restore_seconds") <= 0 {
		t.Error("no survivor loaded a snapshot of the partitions it took over")
	}

	// m2 comes back: it takes partitions from the others, and every
	// member, m2 too, still answers exactly.
	_, vm = startBinary(t, append(args, "--instance", "m2")...)
	waitComplete(t, ms[0], 3)
	for _, tm := range append(ms, vm) {
		tm.compareGroup(o, evs)
	}
}

// A configuration that cannot work in a group ends the binary with one
// line naming the problem and exit status 2.
func TestGroupBadConfig(t *testing.T) {
	url := natstest.Start(t).URL()
	startMain(t, "--nats-url", url, "--group", "g", "--partitions", "8", "--instance", "m0")
	bin := buildBinary(t)
	group := []string{"--http", "127.0.0.1:0", "--nats-url", url, "--group", "g"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no jetstream":  {[]string{"--group", "g", "--jetstream=false"}, "--group g: a group needs JetStream"},
		"bad name":      {[]string{"--http", "127.0.0.1:0", "--nats-url", url, "--group", "a.b"}, `--group "a.b"`},
		"partitions":    {append(group, "--partitions", "4", "--instance", "x"), "--partitions 4, but group g uses 8"},
		"windows":       {append(group, "--partitions", "8", "--instance", "x", "--windows", "1m"), "--windows 1m:1s, but group g uses 1m:1s,5m:5s,1h:1m"},
		"same instance": {append(group, "--partitions", "8", "--instance", "m0"), "--instance m0: a live member of the group already has this instance name"},
	} {
		exitsWithUsage(t, bin, name, tc.args, tc.want)
	}
}

// Throttle checks in a group answer as one standalone Set fed the same
// events would, over HTTP and NATS, from any member; a crossing alerts
// once for the whole group (a room's spike too, decided by the room's
// partition with the new_members policies it turns on); an event whose subject does not name its
// payload's room and user, or that came on a subject the stream could not
// file by partition, is dead-lettered once as subject_mismatch and counted
// by nobody.
func TestGroupThrottleAndMismatch(t *testing.T) {
	url := natstest.Start(t).URL()
	clock := newFrozen()
	policies := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(policies, []byte(`policies:
  - {name: user_room_flood, scope: user_in_room, algorithm: sliding_window, limit: 10, window: 10s}
  - {name: user_flood, scope: user, algorithm: sliding_window, limit: 30, window: 1m}
  - {name: repeated_text, scope: user, algorithm: repeat, limit: 1, window: 30s, mode: shadow}
  - {name: room_burst, scope: room, algorithm: token_bucket, limit: 5, window: 1s, burst: 12}
  - {name: support_total, scope: group, algorithm: fixed_window, limit: 15, window: 1m, rooms: ["support-*"]}
  - {name: paste_wave, scope: room, algorithm: similar, limit: 3, window: 30s}
  - {name: paste_user, scope: user, algorithm: similar, limit: 2, window: 30s, similarity: 0.7, min_chars: 5}
  - {name: surge, scope: room, algorithm: spike, window: 10s, baseline: 1m, min_messages: 4, min_users: 3, rooms: ["support-*"]}
  - {name: calm, scope: user_in_room, algorithm: sliding_window, limit: 1, window: 10s, new_members: 1h}
  - {name: pings, scope: user_in_room, algorithm: sliding_window, limit: 9, window: 1m, cost: {mentions: 1, links: 3}}
`), 0o644)
	ms := startGroup(t, url, "g", 3, clock.Now, "--policies", policies)
	now := clock.ms.Load()
	nc, _ := nats.Connect(url)
	defer nc.Close()
	alerts := make(chan *nats.Msg, 64)
	nc.ChanSubscribe("chatpulse.alerts.throttle", alerts)
	dead := make(chan *nats.Msg, 64)
	nc.ChanSubscribe("chatpulse.deadletter.>", dead)
	nc.Flush()

	ps, _ := throttle.LoadPolicies(policies)
	standalone, _ := throttle.NewSet(ps)
	var evs []chat.Event
	for i := range 11 {
		evs = append(evs, chat.Event{Room: "lobby", User: "alice", TS: now - int64(i), Text: "same", Mentions: []string{"bob", "carol", "bob"}[:i%4]})
		evs = append(evs, chat.Event{Room: fmt.Sprint("support-", i%3), User: fmt.Sprint("u", i), TS: now, Text: fmt.Sprint("t", i)})
	}
	// A copy-paste wave in one room from many accounts (similar, scope
	// room, decided by the room's partition), and one account pasting in
	// many rooms (scope user, by the user's).
	for i := range 5 {
		evs = append(evs, chat.Event{Room: "lobby", User: fmt.Sprint("bot", i), TS: now - 20 + int64(i), Text: []string{"BUY cheap gold now at example.com, best prices in town!", "buy cheap gold NOW at example.com - best prices in town"}[i%2]})
		evs = append(evs, chat.Event{Room: fmt.Sprint("room-", i), User: "paster", TS: now - 10 + int64(i), Text: "join my server at discord.gg/xyz now"})
	}
	var want []throttle.Alert
	for i, e := range evs {
		e.ID = fmt.Sprint("m-", i) // as publishGroup sends it: an alert names the event that crossed
		want = append(want, standalone.Observe(e)...)
	}
	if !slices.ContainsFunc(want, func(a throttle.Alert) bool { return a.Policy == "paste_wave" && a.Count == 4 }) ||
		!slices.ContainsFunc(want, func(a throttle.Alert) bool { return a.Policy == "paste_user" && a.Count == 3 }) {
		t.Fatalf("the standalone Set's alerts have no wave of similar texts: %+v", want)
	}
	if res := standalone.Check(now, "support-1", "u1", "", false); res.Allowed || !slices.ContainsFunc(res.Decisions, func(d throttle.Decision) bool { return d.Policy == "calm" }) {
		t.Fatalf("the spike in support-1 turns calm on: %+v", res)
	}
	publishGroup(t, url, evs)
	// A payload that is not what its subject says, and one on a subject
	// the stream cannot file by partition.
	nc.Publish("chat.lobby.bob", []byte(`{"room":"elsewhere","user":"bob"}`))
	nc.Publish("chat.lobby", []byte(`{"room":"lobby","user":"carol"}`))
	nc.Flush()

	checks := []string{`{"room":"lobby","user":"alice","text":"same"}`, `{"room":"lobby","user":"bob"}`,
		`{"room":"support-1","user":"u1"}`, `{"room":"support-9","user":"zed","text":"t1"}`, `{"room":"elsewhere","user":"alice"}`,
		`{"room":"lobby","user":"zed","text":"buy cheap GOLD now at example.com - best prices in town"}`, `{"room":"room-9","user":"paster","text":"JOIN my server at discord.gg/xyz now!"}`,
		`{"room":"lobby","user":"carol","text":"see http://x","mentions":["bob"]}`, `{"room":"lobby","user":"carol","mentions":["a","b","c","d","e","f","g","h","i","j"]}`,
		`{"room":"lobby","user":"alice","mentions":["bob"]}`}
	for _, body := range checks {
		var req struct {
			Room, User string
			Text       *string
			Mentions   []string
		}
		json.Unmarshal([]byte(body), &req)
		text := ""
		if req.Text != nil {
			text = *req.Text
		}
		wantJSON, _ := json.Marshal(standalone.Decide(now, throttle.Query{Room: req.Room, User: req.User, Text: text, HasText: req.Text != nil, Mentions: req.Mentions}))
		for _, tm := range ms {
			wait.For(t, 20*time.Second, func() error {
				var got map[string]any
				tm.post("/api/v1/throttle/check", body, &got)
				g, _ := json.Marshal(got)
				if got["complete"] != true {
					return fmt.Errorf("check %s on %s is not complete: %s", body, tm.url, g)
				}
				delete(got, "complete")
				delete(got, "missing_partitions")
				var w map[string]any
				json.Unmarshal(wantJSON, &w)
				if !reflect.DeepEqual(got, w) {
					return fmt.Errorf("check %s on %s:\n got %s\nwant %s", body, tm.url, g, wantJSON)
				}
				return nil
			})
		}
		// Over NATS too.
		msg, err := nc.Request("chatpulse.throttle.check", []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		json.Unmarshal(msg.Data, &got)
		delete(got, "complete")
		delete(got, "missing_partitions")
		var w map[string]any
		json.Unmarshal(wantJSON, &w)
		if !reflect.DeepEqual(got, w) {
			t.Errorf("NATS check %s:\n got %s\nwant %s", body, msg.Data, wantJSON)
		}
	}

	// One alert per crossing, for the whole group, and the two dead
	// letters: all of them come...
	var gotAlerts []string
	var deadLetters []*nats.Msg
	collect := func() {
		for len(alerts) > 0 {
			gotAlerts = append(gotAlerts, string((<-alerts).Data))
		}
		for len(dead) > 0 {
			deadLetters = append(deadLetters, <-dead)
		}
	}
	wait.For(t, 20*time.Second, func() error {
		collect()
		if len(gotAlerts) < len(want) || len(deadLetters) < 2 {
			return fmt.Errorf("%d of %d alerts and %d of 2 dead letters", len(gotAlerts), len(want), len(deadLetters))
		}
		return nil
	})
	// ...and none twice. A second one would come from another member's
	// stage as it handled the same events: once the members have received
	// every message (a message's alerts and dead letters are sent before
	// it counts as received), what each sent has reached nc (published),
	// and nc has heard every alert the group's alert stream keeps (it
	// republishes each once), nothing more is on its way.
	total := float64(len(evs) + 2)
	wait.For(t, 20*time.Second, func() error {
		received := 0.0
		for _, tm := range ms {
			received += tm.metric("chatpulse_events_received_total")
		}
		if received < total {
			return fmt.Errorf("the members received %v of %v messages", received, total)
		}
		return nil
	})
	for _, tm := range ms {
		tm.published(nc)
	}
	js, _ := jetstream.New(nc)
	wait.For(t, 20*time.Second, func() error {
		collect()
		s, err := js.Stream(context.Background(), bus.AlertStream("g"))
		if err != nil {
			return err
		}
		if kept := s.CachedInfo().State.Msgs; uint64(len(gotAlerts)) < kept {
			return fmt.Errorf("heard %d of the %d alerts the group's alert stream keeps", len(gotAlerts), kept)
		}
		return nil
	})
	var wantAlerts []string
	for _, a := range want {
		b, _ := json.Marshal(a)
		wantAlerts = append(wantAlerts, string(b))
	}
	slices.Sort(gotAlerts)
	slices.Sort(wantAlerts)
	if spikes := len(slices.DeleteFunc(slices.Clone(want), func(a throttle.Alert) bool { return a.Spike == nil })); spikes != 2 {
		t.Errorf("%d spikes in the standalone's alerts, want 2 (support-0 and support-1)", spikes)
	}
	if !slices.Equal(gotAlerts, wantAlerts) || len(wantAlerts) == 0 {
		t.Errorf("alerts:\n got %v\nwant %v", gotAlerts, wantAlerts)
	}
	var mismatched []string
	for _, m := range deadLetters {
		mismatched = append(mismatched, m.Subject+" "+m.Header.Get("Chatpulse-Subject"))
	}
	slices.Sort(mismatched)
	if fmt.Sprint(mismatched) != "[chatpulse.deadletter.subject_mismatch chat.lobby chatpulse.deadletter.subject_mismatch chat.lobby.bob]" {
		t.Errorf("dead letters: %v", mismatched)
	}
	// Every stage has read past the mismatched events once their dead
	// letters are out, so a complete overview counts evs and nothing else.
	var v struct {
		Messages int64
		Complete bool
	}
	wait.For(t, 20*time.Second, func() error {
		ms[0].get("/api/v1/overview?window=1h", &v)
		if !v.Complete || v.Messages < int64(len(evs)) {
			return fmt.Errorf("the overview counts %d of %d events, complete %v", v.Messages, len(evs), v.Complete)
		}
		return nil
	})
	if v.Messages != int64(len(evs)) {
		t.Errorf("counted %d, want %d (mismatched events count nowhere)", v.Messages, len(evs))
	}
}

// On a 3-node cluster with every stream and bucket at three replicas,
// losing a node changes no answer, and events published afterwards count.
func TestGroupSurvivesANodeLoss(t *testing.T) {
	c := natstest.StartCluster(t)
	url := c.URL()
	clock := newFrozen()
	// A frozen clock does not run, so to the group's clock (measured from
	// the server's time of each member's writes) it falls behind by the
	// time that passes: a member whose writes failed while a node was
	// lost was measured earlier than the others, and --max-skew's 5 s
	// would bound its views' as_of below its own clock. A minute covers
	// the test; the events are at most 3 s ahead either way.
	ms := startGroup(t, url, "g", 3, clock.Now, "--replicas", "3", "--max-skew", "1m")
	nc, _ := nats.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for _, name := range []string{"CHAT", "CHATPULSE_DEADLETTER", "KV_CHATPULSE_GROUPS", "KV_CHATPULSE_GROUP_g", "KV_CHATPULSE_GROUP_g_PROGRESS", "CHATPULSE_GROUP_g_ALERTS"} {
		s, err := js.Stream(context.Background(), name)
		if err != nil || s.CachedInfo().Config.Replicas != 3 {
			t.Fatalf("stream %s: %v, want 3 replicas", name, err)
		}
	}
	now := clock.ms.Load()
	evs := groupTrace(11, now, 1500)
	publishGroup(t, url, evs[:1000])
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(now, evs[:1000])
	for _, tm := range ms {
		tm.compareGroup(o, evs[:1000])
	}

	c.Stop(1)
	publishGroup(t, url, evs[1000:])
	o.Observe(now, evs[1000:])
	for _, tm := range ms {
		tm.compareGroup(o, evs)
	}
}

// A dashboard on one member watches a room whose partition another member
// owns: the view it is pushed is the group's, complete.
func TestGroupWebsocket(t *testing.T) {
	url := natstest.Start(t).URL()
	clock := newFrozen()
	ms := startGroup(t, url, "g", 2, clock.Now, "--push-interval", "100ms")
	c := ms[1].mustDial().reading(t)
	send(t, c, `{"type":"subscribe","view":"room","room":"dot.room","window":"1m"}`)
	now := clock.ms.Load()
	var evs []chat.Event
	for i := range 25 {
		evs = append(evs, chat.Event{Room: "dot.room", User: fmt.Sprint("u", i%4), TS: now})
	}
	publishGroup(t, url, evs)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				t.Fatal("connection closed")
			}
			var v struct {
				Messages int64 `json:"messages"`
				Complete bool  `json:"complete"`
			}
			json.Unmarshal(f.Data, &v)
			if f.Type == "view" && v.Messages == 25 && v.Complete {
				return
			}
		case <-deadline:
			t.Fatal("no complete view of the room with its 25 messages")
		}
	}
}
