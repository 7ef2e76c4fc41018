package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/chatpulse/chatpulse/snapshot"
	"github.com/chatpulse/chatpulse/standalone"
)

// answers are every answer of an instance that a snapshot must keep: every
// view of every window, throttle checks and the active keys, as JSON.
func (tm *testMain) answers(evs []chat.Event) map[string]string {
	tm.t.Helper()
	out := map[string]string{}
	get := func(path string) {
		var v any
		tm.get(path, &v)
		b, _ := json.Marshal(v)
		out[path] = string(b)
	}
	rooms, users := map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		rooms[e.Room], users[e.User] = true, true
	}
	for _, w := range []string{"1m", "5m", "1h"} {
		get("/api/v1/overview?k=100&window=" + w)
		get("/api/v1/rooms?limit=1000&window=" + w)
		for room := range rooms {
			get("/api/v1/rooms/" + url.PathEscape(room) + "?k=100&window=" + w)
		}
		for user := range users {
			get("/api/v1/users/" + url.PathEscape(user) + "?window=" + w)
		}
	}
	get("/api/v1/throttle/active")
	for user := range users {
		for _, room := range []string{"lobby", "a/b"} {
			body := fmt.Sprintf(`{"room":%q,"user":%q,"text":"hello there"}`, room, user)
			var v any
			tm.post("/api/v1/throttle/check", body, &v)
			b, _ := json.Marshal(v)
			out["check "+body] = string(b)
		}
	}
	return out
}

// A restart that loads a snapshot and replays only what came after it
// answers exactly as a full replay of the stream: every view, every
// throttle decision, the active keys (a spike's rooms too). The clock stands still, so the
// answers are compared byte for byte, as_of included.
func TestSnapshotEqualsFullReplay(t *testing.T) {
	clock := newFrozen()
	dir := t.TempDir()
	now := clock.ms.Load()
	r := rand.New(rand.NewPCG(3, 4))
	evs := withJoins(r, randomTrace(r, now, 4000)) // the joins in the snapshot and after it
	for i := range evs {
		if i%5 == 0 { // enough of them to cross the default policies
			evs[i].Room, evs[i].User, evs[i].TS, evs[i].Kind = "lobby", "alice", now-int64(i%50), chat.KindMessage
		}
	}
	first, second := evs[:2500], evs[2500:]
	// The default policies, and a spike that the rooms' bursts cross.
	policies := policiesFile(t, `policies:
  - {name: user_room_flood, scope: user_in_room, algorithm: sliding_window, limit: 10, window: 10s}
  - {name: user_flood, scope: user, algorithm: sliding_window, limit: 30, window: 1m}
  - {name: repeated_text, scope: user, algorithm: repeat, limit: 1, window: 30s, mode: shadow}
  - {name: surge, scope: room, algorithm: spike, window: 1m, baseline: 1h}
`)
	start := func(args ...string) *testMain {
		return startMainAt(t, clock.Now, append(args, "--policies", policies)...)
	}

	a := start("--data-dir", dir, "--snapshot-interval", "50ms")
	for i, e := range first {
		a.publish("chat.x.y", eventJSON(e, i))
	}
	a.waitReceived(len(first))
	wait.For(t, 20*time.Second, func() error {
		if got := a.metric("chatpulse_snapshot_bytes"); got <= 0 {
			return fmt.Errorf("no snapshot saved yet (chatpulse_snapshot_bytes %v)", got)
		}
		return nil
	})
	a.Close()
	a = start("--data-dir", dir, "--snapshot-interval", "0") // saves no more
	for i, e := range second {
		a.publish("chat.x.y", eventJSON(e, len(first)+i))
	}
	a.waitReceived(len(second))
	a.Close()

	// The snapshot covers the first part: the second is replayed.
	restored := start("--data-dir", dir, "--snapshot-interval", "1h")
	if restored.metric("chatpulse_restore_seconds") <= 0 {
		t.Fatal("the restart did not load the snapshot")
	}
	got := restored.answers(evs)
	restored.Close()
	full := start("--data-dir", dir, "--snapshot-interval", "0")
	want := full.answers(evs)
	if len(got) != len(want) {
		t.Fatalf("%d answers, want %d", len(got), len(want))
	}
	if active := want["/api/v1/throttle/active"]; !strings.Contains(active, `"policy":"surge"`) {
		t.Errorf("no room over the spike: %s", active)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s after a snapshot:\n got %s\nwant %s", k, got[k], w)
		}
	}
}

// A snapshot that cannot be used is ignored, and the full replay gives
// the right answers: one of other windows, a corrupt object, one older
// than what the stream still holds; with --snapshot-interval 0 none is
// taken or read.
func TestSnapshotIgnored(t *testing.T) {
	clock := newFrozen()
	now := clock.ms.Load()
	evs := randomTrace(rand.New(rand.NewPCG(5, 6)), now, 600)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(now, evs)

	// setup starts chatpulse on a new data directory, publishes the trace
	// and waits for a snapshot, then stops it.
	setup := func(args ...string) string {
		dir := t.TempDir()
		tm := startMainAt(t, clock.Now, append([]string{"--data-dir", dir, "--snapshot-interval", "50ms"}, args...)...)
		for i, e := range evs {
			tm.publish("chat.x.y", eventJSON(e, i))
		}
		tm.waitReceived(len(evs))
		wait.For(t, 20*time.Second, func() error {
			if got := tm.metric("chatpulse_snapshot_bytes"); got <= 0 {
				return fmt.Errorf("no snapshot saved yet (chatpulse_snapshot_bytes %v)", got)
			}
			return nil
		})
		tm.Close()
		return dir
	}
	// check restarts on dir, and the answers must be right though the
	// snapshot was not loaded.
	check := func(name, dir string, args ...string) {
		tm := startMainAt(t, clock.Now, append([]string{"--data-dir", dir}, args...)...)
		if got := tm.metric("chatpulse_restore_seconds"); got > 0 {
			t.Errorf("%s: the snapshot was loaded", name)
		}
		tm.compareAll(o, now, evs)
		tm.Close()
	}

	check("other windows", setup("--windows", "1m,5m"))

	dir := setup()
	corrupt(t, dir, func(b []byte) []byte { b[len(b)/2] ^= 0xFF; return b })
	check("corrupt", dir)

	dir = setup()
	tm := startMainAt(t, clock.Now, "--data-dir", dir, "--snapshot-interval", "0")
	// Two more events, and all but the last purged: the stream lost one
	// the snapshot did not cover.
	tm.publish("chat.x.y", eventJSON(chat.Event{Room: "lost", User: "comer", TS: now}, 0))
	tm.publish("chat.x.y", eventJSON(chat.Event{Room: "late", User: "comer", TS: now}, 0))
	tm.waitReceived(len(evs) + 2)
	js, _ := jetstream.New(tm.nc)
	s, _ := js.Stream(context.Background(), "CHAT")
	if err := s.Purge(context.Background(), jetstream.WithPurgeKeep(1)); err != nil { // all but the last event
		t.Fatal(err)
	}
	tm.Close()
	o2 := oracle.New(ws)
	o2.Observe(now, []chat.Event{{Room: "late", User: "comer", TS: now}})
	tm = startMainAt(t, clock.Now, "--data-dir", dir)
	if got := tm.metric("chatpulse_restore_seconds"); got > 0 {
		t.Error("a snapshot older than the stream's first event was loaded")
	}
	tm.compareAll(o2, now, []chat.Event{{Room: "late", User: "comer", TS: now}})
	tm.Close()

	// --snapshot-interval 0: nothing saved, not even by Close, which saves
	// a last snapshot whenever snapshots are on: once it returns, none
	// can come. The NATS server outlives chatpulse, to be asked then.
	url := natstest.Start(t).URL()
	tm = startMainAt(t, clock.Now, "--nats-url", url, "--snapshot-interval", "0")
	tm.publish("chat.x.y", eventJSON(evs[0], 0))
	tm.waitReceived(1)
	if got := tm.metric("chatpulse_snapshot_bytes"); got > 0 {
		t.Error("a snapshot with --snapshot-interval 0")
	}
	tm.Close()
	if _, err := jetStreamOf(t, url).ObjectStore(context.Background(), "CHATPULSE_SNAPSHOTS"); err == nil {
		t.Error("the object store exists with --snapshot-interval 0")
	}
}

// corrupt rewrites the standalone snapshot under dir through a chatpulse
// that takes none.
func corrupt(t *testing.T, dir string, change func([]byte) []byte) {
	t.Helper()
	tm := startMainAt(t, nil, "--data-dir", dir, "--snapshot-interval", "0")
	js, _ := jetstream.New(tm.nc)
	ctx := context.Background()
	obj, err := js.ObjectStore(ctx, "CHATPULSE_SNAPSHOTS")
	if err != nil {
		t.Fatal(err)
	}
	name := standalone.SnapshotName(tm.Config.Stream, tm.Config.Instance)
	b, err := obj.GetBytes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, name, change(b)); err != nil {
		t.Fatal(err)
	}
	tm.Close()
}

// The built binary, saving a snapshot every 100 ms while events flow, is
// killed with SIGKILL three times, between snapshots and while saving one;
// each restart loads the last complete snapshot, replays what came after,
// and in the end every view equals the oracle's.
func TestSnapshotSurvivesSIGKILL(t *testing.T) {
	natsURL := natstest.Start(t).URL()
	args := []string{"--nats-url", natsURL, "--snapshot-interval", "100ms", "--instance", "killed"}
	evs := recentTrace(21, 6000)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(time.Now().UnixMilli(), evs)

	cmd, tm := startBinary(t, args...)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(8, 9))
	for kill := range 3 {
		for i := kill * 1500; i < (kill+1)*1500; i++ {
			if _, err := js.Publish(ctx, "chat.x.y", []byte(eventJSON(evs[i], i))); err != nil {
				t.Fatal(err)
			}
		}
		// Now and then right away, while a snapshot is being written.
		time.Sleep(time.Duration(r.IntN(250)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		cmd, tm = startBinary(t, args...)
	}
	for i := 4500; i < len(evs); i++ {
		js.Publish(ctx, "chat.x.y", []byte(eventJSON(evs[i], i)))
	}
	if tm.metric("chatpulse_restore_seconds") <= 0 {
		t.Error("the last restart did not load a snapshot")
	}
	tm.compareGroup(o, evs)
}

// After a SIGKILL with the embedded NATS server, the restart loads the
// local copy of the last snapshot while the server recovers its store,
// and keeps it because the snapshot store holds that very snapshot: every
// view equals the oracle's. A copy the store does not hold (another id:
// the store got a later one, say, and the copy was not written) is not
// used; the store's snapshot is, and every view is exact still.
func TestSnapshotLocalCopyAfterSIGKILL(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	httpPort, natsPort := freePort(t), freePort(t)
	copyPath := filepath.Join(dir, "snapshots", standalone.SnapshotName("CHAT", "local")+".snapshot")
	var log *syncBuffer
	tm := &testMain{t: t, url: fmt.Sprint("http://127.0.0.1:", httpPort)}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--data-dir", dir, "--http", fmt.Sprint("127.0.0.1:", httpPort), "--nats-listen", fmt.Sprint("127.0.0.1:", natsPort),
			"--snapshot-interval", "100ms", "--instance", "local")
		log = &syncBuffer{t: t}
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		tm.waitReady()
		return cmd
	}
	evs := recentTrace(31, 3000)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(time.Now().UnixMilli(), evs)
	publish := func(from, to int) {
		nc, err := nats.Connect(fmt.Sprint("nats://127.0.0.1:", natsPort))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		for i := from; i < to; i++ {
			if _, err := js.Publish(context.Background(), "chat.x.y", []byte(eventJSON(evs[i], i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// settled waits until the store's snapshot covers the whole stream
	// (so that no other is saved: nothing came since) and the local copy
	// is of it.
	settled := func() {
		nc, err := nats.Connect(fmt.Sprint("nats://127.0.0.1:", natsPort))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx := context.Background()
		wait.For(t, 30*time.Second, func() error {
			s, err := js.Stream(ctx, "CHAT")
			if err != nil {
				return err
			}
			obj, err := js.ObjectStore(ctx, bus.SnapshotBucket)
			if err != nil {
				return err
			}
			name := standalone.SnapshotName("CHAT", "local")
			data, err := obj.GetBytes(ctx, name)
			if err != nil {
				return err
			}
			snap, err := snapshot.Decode(data)
			if err != nil {
				return err
			}
			if last := s.CachedInfo().State.LastSeq; len(snap.Stages) != 1 || snap.Stages[0].Seq != last {
				return fmt.Errorf("the store's snapshot covers %+v, the stream ends at %d", snap.Stages, last)
			}
			info, err := obj.GetInfo(ctx, name)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(copyPath)
			if err != nil {
				return err
			}
			if !bytes.Contains(b[:min(len(b), 100)], []byte("\n"+info.NUID+"\n")) {
				return fmt.Errorf("the local copy is not of the store's snapshot %s yet", info.NUID)
			}
			return nil
		})
	}
	kill := func(cmd *exec.Cmd) {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
	}

	cmd := start()
	publish(0, 2000)
	settled()
	kill(cmd)
	cmd = start()
	if !strings.Contains(log.String(), "local_copy=true") {
		t.Errorf("the restart did not load the local copy:\n%s", log.String())
	}
	publish(2000, 2500)
	settled()
	kill(cmd)
	// The copy's id is not the store's: the copy is not used.
	b, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, bytes.Replace(b, []byte("\n"), []byte("\nnot-"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = start()
	if l := log.String(); !strings.Contains(l, "the store holds another") || !strings.Contains(l, "local_copy=false") {
		t.Errorf("the restart used a local copy the store does not hold:\n%s", l)
	}
	publish(2500, len(evs))
	settled()
	tm.compareGroup(o, evs)
	kill(cmd)
}
