package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// The inventory of docs/snapshots.md ("What decides an answer"): every
// piece of state that decides an answer or an alert, how a test drives it
// to a state that is not the empty one, and the answers that show it.
// TestRestartKeepsEveryPiece runs them all through every kind of restart;
// a piece added to the state is a row added here.
//
// A piece drives in two phases: before the restart and after it. What it
// does after lets a piece show what the restart must carry over without
// showing in an answer by itself (a member's last join, telling a
// repeated join from a new one).
type piece struct {
	name   string
	kept   string // where it lives across a restart, as docs/snapshots.md says
	drive  func(d *driver, phase int)
	probes []string // GET paths, or "check <body>" for a check
}

// inventoryPolicies are the policies the pieces need.
const inventoryPolicies = `policies:
  - {name: flood, scope: user_in_room, algorithm: sliding_window, limit: 3, window: 10s}
  - {name: strikes, scope: user, algorithm: fixed_window, limit: 2, window: 1m, escalate: [5m, 20m]}
  - {name: repeated, scope: user, algorithm: repeat, limit: 1, window: 30s}
  - {name: bucket, scope: room, algorithm: token_bucket, limit: 4, window: 1h, rooms: [vault]}
  - {name: raid, scope: room, algorithm: join_wave, limit: 3, window: 1m}
  - {name: newcomers, scope: user_in_room, algorithm: sliding_window, limit: 1, window: 30s, new_members: 10m}
  - {name: alike, scope: room, algorithm: similar, limit: 2, window: 1m, rooms: [bazaar]}
  - {name: surge, scope: room, algorithm: spike, window: 1m, baseline: 1h, min_messages: 3, min_users: 2, rooms: [stage]}
  - {name: pings, scope: user_in_room, algorithm: sliding_window, limit: 5, window: 1m, cost: {mentions: 1, links: 2}, rooms: [pinged]}
`

var inventory = []piece{
	{
		name: "windows", kept: "snapshot (aggregator), else replay",
		drive: func(d *driver, phase int) {
			for i := range 12 { // late ones too: every window, some in none
				d.message("plaza", fmt.Sprint("p", i%5), int64(i)*397_000+int64(phase)*11)
			}
		},
		probes: []string{"/api/v1/overview?k=100&window=1m", "/api/v1/overview?k=100&window=1h", "/api/v1/rooms/plaza?k=100&window=5m", "/api/v1/users/p3?window=1h"},
	},
	{
		name: "a policy's keys and marks", kept: "snapshot (throttle), else replay",
		drive: func(d *driver, phase int) {
			for i := range 3 {
				d.message("lobby", "alice", int64(4000-phase*2000-i*100))
			}
		},
		probes: []string{`check {"room":"lobby","user":"alice"}`, "/api/v1/throttle/active"},
	},
	{
		name: "repeat hashes", kept: "snapshot (throttle), else replay",
		drive: func(d *driver, phase int) {
			if phase == 0 {
				d.text("lobby", "rita", 5000, "buy cheap coins")
			}
		},
		probes: []string{`check {"room":"lobby","user":"rita","text":"buy cheap coins"}`, `check {"room":"lobby","user":"rita","text":"something else"}`},
	},
	{
		name: "similar fingerprints", kept: "snapshot (throttle), else replay",
		drive: func(d *driver, phase int) { // a wave of alike texts, half of it before the restart
			for i := range 2 {
				d.text("bazaar", fmt.Sprint("seller", phase*2+i), int64(30_000-phase*10_000-i*100), "Cheap followers at example.com, DM me now!")
			}
		},
		probes: []string{`check {"room":"bazaar","user":"x","text":"cheap followers at example.com - dm me now"}`, `check {"room":"bazaar","user":"x","text":"anyone up for a game tonight?"}`, "/api/v1/throttle/active"},
	},
	{
		name: "consumed ids", kept: "snapshot (throttle)",
		drive: func(d *driver, phase int) {
			if phase == 0 { // checked and consumed; its event comes after the restart
				d.check(`{"room":"shop","user":"bob","consume":true,"id":"bob-1"}`)
				return
			}
			// Posted when checked: a full replay, which never saw the
			// check, counts it in the same buckets.
			d.event(`{"id":"bob-1","room":"shop","user":"bob","ts":%q,"text":"hello"}`, 0)
		},
		probes: []string{`check {"room":"shop","user":"bob"}`},
	},
	{
		name: "costs, consumed ones among them", kept: "snapshot (throttle), else replay",
		drive: func(d *driver, phase int) {
			if phase == 0 { // 4, then a consumed 1, whose event comes after the restart
				d.event(`{"id":"frank-1","room":"pinged","user":"frank","ts":%q,"text":"see http://a","mentions":["x","y","x"]}`, 3000)
				d.check(`{"room":"pinged","user":"frank","consume":true,"id":"frank-2","text":"hi","mentions":["z"]}`)
				return
			}
			d.event(`{"id":"frank-2","room":"pinged","user":"frank","ts":%q,"text":"hi","mentions":["z"]}`, 0)
		},
		probes: []string{`check {"room":"pinged","user":"frank","mentions":["x"]}`, `check {"room":"pinged","user":"frank","text":"hi"}`},
	},
	{
		name: "penalties and strikes", kept: "snapshot (throttle), else replay",
		drive: func(d *driver, phase int) {
			for i := range 3 { // a crossing in each phase: the second strike's penalty
				d.message("arena", "carol", int64(50_000-phase*5000-i*10))
			}
		},
		probes: []string{`check {"room":"arena","user":"carol"}`, "/api/v1/throttle/active"},
	},
	{
		name: "a token bucket", kept: "snapshot (throttle), else replay",
		drive: func(d *driver, phase int) {
			for i := range 3 {
				d.message("vault", fmt.Sprint("v", i), int64(20_000-phase*5000-i))
			}
		},
		probes: []string{`check {"room":"vault","user":"v9"}`},
	},
	{
		name: "slow mode's last posts", kept: "snapshot (throttle, format 3), else replay",
		drive: func(d *driver, phase int) {
			if phase == 0 {
				d.put("/api/v1/rooms/quiet/slowmode", `{"interval":"30s","for":"1h"}`)
				d.message("quiet", "dave", 1000)
			}
		},
		probes: []string{`check {"room":"quiet","user":"dave"}`, `check {"room":"quiet","user":"other"}`},
	},
	{
		name: "join waves and first sightings", kept: "snapshot (throttle, format 3), else replay",
		drive: func(d *driver, phase int) {
			if phase == 0 { // a regular, long before; then a wave
				d.message("hall", "erin", 20*60_000)
				for i := range 4 {
					d.join("hall", fmt.Sprint("raider", i), int64(5000-i))
					d.message("hall", fmt.Sprint("raider", i), int64(4000-i))
				}
			}
		},
		probes: []string{`check {"room":"hall","user":"erin"}`, `check {"room":"hall","user":"raider1"}`, "/api/v1/throttle/active"},
	},
	{
		name: "spikes", kept: "snapshot (throttle), else replay",
		drive: func(d *driver, phase int) {
			if phase == 0 { // a past, then a spike that crosses
				for i := range 6 {
					d.message("stage", "old", int64(30*60_000+i))
				}
				for i := range 3 {
					d.message("stage", fmt.Sprint("fan", i), int64(20_000-i))
				}
				return
			}
			for i := range 2 { // still over: the same crossing
				d.message("stage", fmt.Sprint("fan", 3+i), int64(10_000-i))
			}
		},
		probes: []string{`check {"room":"stage","user":"fan3"}`, "/api/v1/throttle/active"},
	},
	{
		name: "memberships", kept: "snapshot (aggregator), else replay",
		drive: func(d *driver, phase int) {
			d.join("club", "frank", int64(9000-phase*1000)) // the second a repeated join: counted nowhere
		},
		probes: []string{"/api/v1/rooms/club?window=1m"},
	},
	{
		name: "moderators' actions", kept: "bucket CHATPULSE_MODERATION",
		drive: func(d *driver, phase int) {
			if phase == 0 {
				d.put("/api/v1/users/troll/timeout", `{"for":"1h"}`)
			}
		},
		probes: []string{`check {"room":"lobby","user":"troll"}`, "/api/v1/moderation"},
	},
}

// A driver publishes the pieces' events and makes their calls, at times
// before the frozen clock's now.
type driver struct {
	tm   *testMain
	now  int64
	sent int // events published
}

func (d *driver) event(format string, ago int64) {
	d.tm.t.Helper()
	var e struct{ Room, User string }
	payload := fmt.Sprintf(format, time.UnixMilli(d.now-ago).UTC().Format(time.RFC3339Nano))
	if err := json.Unmarshal([]byte(payload), &e); err != nil {
		d.tm.t.Fatal(err)
	}
	d.tm.publish("chat."+e.Room+"."+e.User, payload) // the subject group mode asks for
	d.sent++
}

func (d *driver) kind(kind chat.Kind, room, user, text string, ago int64) {
	d.tm.t.Helper()
	e := map[string]any{"id": fmt.Sprintf("inv-%s-%s-%d", room, user, ago), "type": kind.String(), "room": room, "user": user,
		"ts": time.UnixMilli(d.now - ago).UTC().Format(time.RFC3339Nano)}
	if text != "" {
		e["text"] = text
	}
	b, _ := json.Marshal(e)
	d.tm.publish("chat."+room+"."+user, string(b))
	d.sent++
}

func (d *driver) message(room, user string, ago int64) {
	d.kind(chat.KindMessage, room, user, "hi", ago)
}
func (d *driver) text(room, user string, ago int64, t string) {
	d.kind(chat.KindMessage, room, user, t, ago)
}
func (d *driver) join(room, user string, ago int64) { d.kind(chat.KindJoin, room, user, "", ago) }

func (d *driver) check(body string) {
	d.tm.t.Helper()
	if code := d.tm.post("/api/v1/throttle/check", body, nil); code != 200 {
		d.tm.t.Fatalf("check %s: %d", body, code)
	}
}

func (d *driver) put(path, body string) {
	d.tm.t.Helper()
	if code := d.tm.put(path, body, nil); code/100 != 2 {
		d.tm.t.Fatalf("PUT %s: %d", path, code)
	}
}

// drive runs every piece's phase on tm, and waits until tm has taken in
// what it published.
func drive(tm *testMain, now int64, phase int) {
	tm.t.Helper()
	before := tm.metric("chatpulse_events_received_total")
	d := &driver{tm: tm, now: now}
	for _, p := range inventory {
		p.drive(d, phase)
	}
	tm.waitReceived(int(before) + d.sent)
}

// inventoryAnswers are the answers of every piece's probes.
func inventoryAnswers(tm *testMain) map[string]string {
	tm.t.Helper()
	out := map[string]string{}
	for _, p := range inventory {
		for _, probe := range p.probes {
			var v any
			if body, ok := strings.CutPrefix(probe, "check "); ok {
				tm.post("/api/v1/throttle/check", body, &v)
			} else {
				tm.get(probe, &v)
			}
			b, _ := json.Marshal(v)
			out[p.name+": "+probe] = string(b)
		}
	}
	return out
}

// Every piece of the inventory, driven to a state that is not the empty
// one before a restart and after it, answers after each kind of restart
// exactly as one instance that never stopped: a clean stop (the last
// snapshot saved as it stops), a snapshot older than the stream's end
// (what a kill -9 leaves: the snapshot, then the tail replayed), no
// snapshot at all (the full replay), and a group member's partitions
// taken over by another. The clock stands still, so the answers are
// compared byte for byte; the reference's are also checked against what
// the pieces must show, so that a piece the restarts all lose does not
// pass as equal.
func TestRestartKeepsEveryPiece(t *testing.T) {
	clock := newFrozen()
	now := clock.ms.Load()
	policies := policiesFile(t, inventoryPolicies)
	start := func(t *testing.T, dir string, args ...string) *testMain {
		return startMainAt(t, clock.Now, append([]string{"--data-dir", dir, "--policies", policies}, args...)...)
	}

	ref := start(t, t.TempDir(), "--snapshot-interval", "0")
	drive(ref, now, 0)
	drive(ref, now, 1)
	want := inventoryAnswers(ref)
	ref.Close()
	checkInventory(t, want)

	compare := func(t *testing.T, kind string, got map[string]string) {
		t.Helper()
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %s:\n got %s\nwant %s", kind, k, got[k], w)
			}
		}
	}

	t.Run("clean", func(t *testing.T) {
		dir := t.TempDir()
		a := start(t, dir, "--snapshot-interval", "1h") // saves as it stops
		drive(a, now, 0)
		a.Close()
		b := start(t, dir, "--snapshot-interval", "1h")
		if b.metric("chatpulse_restore_seconds") <= 0 {
			t.Fatal("the restart did not load the snapshot")
		}
		drive(b, now, 1)
		compare(t, "clean", inventoryAnswers(b))
	})

	t.Run("snapshot and tail", func(t *testing.T) {
		dir := t.TempDir()
		a := start(t, dir, "--snapshot-interval", "1h")
		drive(a, now, 0)
		a.Close()
		// Saves nothing and reads no snapshot: what it takes in is the
		// tail that the snapshot does not cover.
		b := start(t, dir, "--snapshot-interval", "0")
		drive(b, now, 1)
		compare(t, "full replay", inventoryAnswers(b))
		b.Close()
		c := start(t, dir, "--snapshot-interval", "1h")
		if c.metric("chatpulse_restore_seconds") <= 0 {
			t.Fatal("the restart did not load the snapshot")
		}
		compare(t, "snapshot and tail", inventoryAnswers(c))
	})

	t.Run("takeover", func(t *testing.T) {
		natsURL := natstest.Start(t).URL()
		group := []string{"--nats-url", natsURL, "--group", "g", "--partitions", "4", "--snapshot-interval", "1h"}
		a := start(t, t.TempDir(), append(group, "--instance", "m0")...)
		waitComplete(t, a, 1)
		drive(a, now, 0)
		b := start(t, t.TempDir(), append(group, "--instance", "m1")...)
		waitComplete(t, b, 2)
		a.Close() // hands its partitions over, with their snapshots
		wait.For(t, 30*time.Second, func() error {
			var st groupStatus
			b.get("/api/v1/group", &st)
			if !st.Complete || len(st.Members) != 1 {
				return fmt.Errorf("m1 sees %d members, complete %v: m0's partitions not yet taken over", len(st.Members), st.Complete)
			}
			return nil
		})
		drive(b, now, 1)
		got := inventoryAnswers(b)
		for k, g := range got { // a member's views say they are complete; the standalone's say nothing
			got[k] = stripGroup(g)
		}
		compare(t, "takeover", got)
	})
}

// stripGroup removes what only a group member's answers carry.
func stripGroup(answer string) string {
	var v any
	if json.Unmarshal([]byte(answer), &v) != nil {
		return answer
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, "complete")
		delete(m, "missing_partitions")
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// checkInventory checks that the reference's answers show each piece in a
// state that is not the empty one.
func checkInventory(t *testing.T, want map[string]string) {
	t.Helper()
	denied := func(probe, policy string) {
		t.Helper()
		var res struct {
			Allowed   bool
			Decisions []struct {
				Policy  string
				Allowed bool
			}
		}
		json.Unmarshal([]byte(want[probe]), &res)
		for _, d := range res.Decisions {
			if d.Policy == policy && !d.Allowed {
				return
			}
		}
		t.Errorf("the reference: %s = %s, want denied by %s", probe, want[probe], policy)
	}
	denied(`a policy's keys and marks: check {"room":"lobby","user":"alice"}`, "flood")
	denied(`repeat hashes: check {"room":"lobby","user":"rita","text":"buy cheap coins"}`, "repeated")
	denied(`penalties and strikes: check {"room":"arena","user":"carol"}`, "strikes")
	denied(`a token bucket: check {"room":"vault","user":"v9"}`, "bucket")
	denied(`slow mode's last posts: check {"room":"quiet","user":"dave"}`, "slowmode")
	denied(`join waves and first sightings: check {"room":"hall","user":"raider1"}`, "newcomers")
	denied(`moderators' actions: check {"room":"lobby","user":"troll"}`, "timeout")
	denied(`spikes: check {"room":"stage","user":"fan3"}`, "newcomers") // turned on by the spike
	if active := want["spikes: /api/v1/throttle/active"]; !strings.Contains(active, `"policy":"surge"`) || !strings.Contains(active, `"baseline_messages":6`) {
		t.Errorf("the reference: active %s, want the spike in stage over a past of 6", active)
	}
	denied(`costs, consumed ones among them: check {"room":"pinged","user":"frank","mentions":["x"]}`, "pings")
	if w := want[`costs, consumed ones among them: check {"room":"pinged","user":"frank","text":"hi"}`]; !strings.Contains(w, `"allowed":true,"count":5,"limit":5,"mode":"enforce","policy":"pings"`) {
		t.Errorf("the reference: a free message of frank's: %s, want allowed, pings holding 5", w)
	}
	var room struct{ Joins int }
	json.Unmarshal([]byte(want["memberships: /api/v1/rooms/club?window=1m"]), &room)
	if room.Joins != 1 {
		t.Errorf("the reference: club's joins %d, want 1 (the second join repeated)", room.Joins)
	}
}
