package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// floodPolicies is one user_in_room policy of limit messages per hour
// (an hour: nothing leaves the window while a test runs).
func floodPolicies(limit int) string {
	return fmt.Sprintf("policies:\n  - name: flood\n    scope: user_in_room\n    algorithm: sliding_window\n    limit: %d\n    window: 1h\n", limit)
}

// brokenPolicies is not valid on line 6, field window.
const brokenPolicies = "policies:\n  - name: flood\n    scope: user_in_room\n    algorithm: sliding_window\n    limit: 3\n    window: 10x\n"

// writeAtomically replaces path by rename, as editors save.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// policiesAnswer is GET /api/v1/throttle/policies.
type policiesAnswer struct {
	Source   string `json:"source"`
	Since    string `json:"since"`
	Policies []struct {
		Name   string `json:"name"`
		Limit  int    `json:"limit"`
		Window string `json:"window"`
		Mode   string `json:"mode"`
	} `json:"policies"`
	LastError *struct {
		At    string `json:"at"`
		Error string `json:"error"`
	} `json:"last_error"`
}

func (tm *testMain) policies() policiesAnswer {
	tm.t.Helper()
	var a policiesAnswer
	if code := tm.get("/api/v1/throttle/policies", &a); code != 200 {
		tm.t.Fatalf("GET /api/v1/throttle/policies: %d", code)
	}
	return a
}

// waitLimit waits until the flood policy in force has limit.
func (tm *testMain) waitLimit(limit int) policiesAnswer {
	tm.t.Helper()
	var a policiesAnswer
	wait.For(tm.t, 10*time.Second, func() error {
		a = tm.policies()
		if len(a.Policies) != 1 || a.Policies[0].Limit != limit {
			return fmt.Errorf("policies in force %+v, want flood's limit %d", a.Policies, limit)
		}
		return nil
	})
	return a
}

// floodCheck is alice's check in lobby: allowed, and the count flood holds.
func (tm *testMain) floodCheck() (bool, int64) {
	tm.t.Helper()
	var res struct {
		Allowed   bool
		Decisions []struct{ Count int64 }
	}
	tm.post("/api/v1/throttle/check", `{"room":"lobby","user":"alice"}`, &res)
	if len(res.Decisions) != 1 {
		tm.t.Fatalf("check: %d decisions, want 1 (flood)", len(res.Decisions))
	}
	return res.Allowed, res.Decisions[0].Count
}

// aliceFloods publishes n messages of alice in lobby and waits until
// flood holds them.
func (tm *testMain) aliceFloods(n int) {
	tm.t.Helper()
	for i := range n {
		tm.publish("chat.lobby.alice", fmt.Sprintf(`{"room":"lobby","user":"alice","text":"spam %d"}`, i))
	}
	wait.For(tm.t, 10*time.Second, func() error {
		if _, count := tm.floodCheck(); count != int64(n) {
			return fmt.Errorf("flood counts %d of alice's %d messages", count, n)
		}
		return nil
	})
}

// A policies file edited while chatpulse runs takes effect without a
// signal, saved in place or by rename; a user over the limit stays over
// it when the limit changes (the policy keeps its state), and a broken
// version is refused whole: counted, shown, the old policy in force.
func TestPoliciesFileChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(path, []byte(floodPolicies(3)), 0o644)
	tm := startMain(t, "--policies", path)
	start := tm.policies()
	if start.Source != path || start.LastError != nil || start.Policies[0].Window != "1h" || start.Policies[0].Mode != "enforce" {
		t.Fatalf("at start: %+v", start)
	}
	if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 0 {
		t.Fatalf("reload errors at start: %v", got)
	}
	tm.aliceFloods(4)
	if allowed, _ := tm.floodCheck(); allowed {
		t.Fatal("alice over the limit of 3, allowed")
	}

	writeAtomically(t, path, floodPolicies(10))
	raised := tm.waitLimit(10)
	if raised.Since <= start.Since {
		t.Errorf("since %s, not after the start's %s", raised.Since, start.Since)
	}
	if allowed, count := tm.floodCheck(); !allowed || count != 4 {
		t.Errorf("limit 10: allowed %v with count %d; want allowed, the 4 messages kept", allowed, count)
	}
	os.WriteFile(path, []byte(floodPolicies(2)), 0o644) // in place
	tm.waitLimit(2)
	if allowed, count := tm.floodCheck(); allowed || count != 4 {
		t.Errorf("limit 2: allowed %v with count %d; want denied, the 4 messages kept", allowed, count)
	}

	writeAtomically(t, path, brokenPolicies)
	wait.For(t, 10*time.Second, func() error {
		if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 1 {
			return fmt.Errorf("%v reload errors, want 1: the broken version refused", got)
		}
		return nil
	})
	a := tm.policies()
	if a.Policies[0].Limit != 2 || a.LastError == nil || !strings.Contains(a.LastError.Error, path+":6: policies[0].window") {
		t.Errorf("after a broken version: %+v, %+v; want limit 2 in force and the error naming file, line 6 and field", a, a.LastError)
	}
	if allowed, _ := tm.floodCheck(); allowed {
		t.Error("the broken version let alice through")
	}
	// The same broken file seen again is not counted again: two looks
	// find it unchanged, and change nothing.
	unchanged := tm.policyUnchanged.Load()
	wait.For(t, 10*policyPoll, func() error {
		if n := tm.policyUnchanged.Load() - unchanged; n < 2 {
			return fmt.Errorf("%d looks at the broken file since it was refused, want 2", n)
		}
		return nil
	})
	if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 1 {
		t.Errorf("reload errors %v, want 1", got)
	}
	writeAtomically(t, path, floodPolicies(5))
	if a := tm.waitLimit(5); a.LastError != nil {
		t.Errorf("last_error after a good version: %+v", a.LastError)
	}
}

// SIGHUP alone reloads the file (here chatpulse does not look at it
// otherwise).
func TestPoliciesSIGHUPInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(path, []byte(floodPolicies(3)), 0o644)
	tm := startMainWith(t, func(m *Main) { m.policyPoll = 0 }, "--policies", path)
	os.WriteFile(path, []byte(floodPolicies(7)), 0o644)
	if a := tm.policies(); a.Policies[0].Limit != 3 {
		t.Fatalf("reloaded without a signal or a poll: %+v", a)
	}
	signalled := chat.Time(time.Now().UnixMilli()).String()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The new limit is in force since the signal, not before it.
	if a := tm.waitLimit(7); a.Since < signalled {
		t.Fatalf("reloaded without a signal or a poll: in force since %s, signalled at %s", a.Since, signalled)
	}
}

// The built binary, sent SIGHUP after its policies file was edited,
// applies it and goes on running; a broken version is refused with one
// log line naming the file, the line and the field.
func TestPoliciesSIGHUPBinary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(path, []byte(floodPolicies(3)), 0o644)
	cmd, tm := startBinary(t, "--nats-url", natstest.Start(t).URL(), "--policies", path)

	os.WriteFile(path, []byte(floodPolicies(8)), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	tm.waitLimit(8)

	os.WriteFile(path, []byte(brokenPolicies), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	wait.For(t, 10*time.Second, func() error {
		if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 1 {
			return fmt.Errorf("%v reload errors, want 1: the broken version refused", got)
		}
		return nil
	})
	var lines []string
	for _, l := range strings.Split(tm.log.String(), "\n") {
		if strings.Contains(l, "policies not reloaded") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], path+":6: policies[0].window") {
		t.Errorf("log lines of the refusal: %q; want one naming %s, line 6 and the field", lines, path)
	}
	if a := tm.policies(); a.Policies[0].Limit != 8 {
		t.Errorf("limit %d in force after the broken version, want 8", a.Policies[0].Limit)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGHUPs and SIGTERM: %v", err)
	}
}

// SIGHUP to a chatpulse without a policies file to read again is noted in
// the log, and ends nothing (Go's default for it would end the process).
func TestSIGHUPWithoutPoliciesFile(t *testing.T) {
	cmd, tm := startBinary(t, "--nats-url", natstest.Start(t).URL())
	cmd.Process.Signal(syscall.SIGHUP)
	wait.For(t, 10*time.Second, func() error {
		if !strings.Contains(tm.log.String(), "SIGHUP: no policies file to read again") {
			return errors.New("the SIGHUP not noted in the log")
		}
		return nil
	})
	tm.waitReady()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGHUP and SIGTERM: %v", err)
	}
}

// jetStreamOf is a client of the NATS server at url, as the nats CLI is.
func jetStreamOf(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// putKV puts value under bucket/key of the NATS server at url, making the
// bucket if needed.
func putKV(t *testing.T, js jetstream.JetStream, bucket, key, value string) {
	t.Helper()
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, key, value); err != nil {
		t.Fatal(err)
	}
}

// Policies in a key-value key: both members of a group apply each new
// version, on every partition they hold; a broken one is refused by both,
// the old policy in force.
func TestPoliciesKVGroup(t *testing.T) {
	url := natstest.Start(t).URL()
	js := jetStreamOf(t, url)
	putKV(t, js, "limits", "chat", floodPolicies(3))
	ms := startGroup(t, url, "g", 2, nil, "--policies", "kv:limits/chat")
	for _, tm := range ms {
		if a := tm.policies(); a.Source != "kv:limits/chat" || a.Policies[0].Limit != 3 {
			t.Fatalf("at start: %+v", a)
		}
	}
	publishGroupRaw(t, ms[0], 4)
	for _, tm := range ms {
		wait.For(t, 10*time.Second, func() error {
			if _, count := tm.floodCheck(); count != 4 {
				return fmt.Errorf("flood on %s counts %d of alice's 4 messages", tm.url, count)
			}
			return nil
		})
	}

	putKV(t, js, "limits", "chat", floodPolicies(10))
	for _, tm := range ms {
		tm.waitLimit(10)
		if allowed, count := tm.floodCheck(); !allowed || count != 4 {
			t.Errorf("limit 10: allowed %v with count %d; want allowed, the 4 messages kept", allowed, count)
		}
	}
	putKV(t, js, "limits", "chat", brokenPolicies)
	for _, tm := range ms {
		wait.For(t, 10*time.Second, func() error {
			if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 1 {
				return fmt.Errorf("%v reload errors, want 1: the broken version refused", got)
			}
			return nil
		})
		a := tm.policies()
		if a.Policies[0].Limit != 10 || a.LastError == nil || !strings.Contains(a.LastError.Error, "kv:limits/chat:6: policies[0].window") {
			t.Errorf("after a broken version: %+v; want limit 10 and the error naming the key, line 6 and field", a)
		}
	}
	putKV(t, js, "limits", "chat", floodPolicies(2))
	for _, tm := range ms {
		tm.waitLimit(2)
		if allowed, count := tm.floodCheck(); allowed || count != 4 {
			t.Errorf("limit 2: allowed %v with count %d; want denied, the 4 messages kept", allowed, count)
		}
	}
	// The first group-scoped policy would need partition 0 to read the
	// stream another way: refused by every member, until a restart.
	putKV(t, js, "limits", "chat", floodPolicies(2)+"  - name: all\n    scope: group\n    algorithm: fixed_window\n    limit: 100\n    window: 1m\n")
	for _, tm := range ms {
		wait.For(t, 10*time.Second, func() error {
			if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 2 {
				return fmt.Errorf("%v reload errors on %s, want 2: the group-scoped version refused", got, tm.url)
			}
			return nil
		})
		if a := tm.policies(); len(a.Policies) != 1 || a.LastError == nil || !strings.Contains(a.LastError.Error, "group-scoped") {
			t.Errorf("after a group-scoped version: %+v", a)
		}
	}
}

// publishGroupRaw publishes n messages of alice in lobby, as a chat
// server of the group would.
func publishGroupRaw(t *testing.T, tm *testMain, n int) {
	t.Helper()
	for i := range n {
		tm.publish("chat.lobby.alice", fmt.Sprintf(`{"room":"lobby","user":"alice","text":"spam %d"}`, i))
	}
	tm.nc.Flush()
}

// A kv: source whose bucket or key is missing at start, or holds policies
// that are not valid, is a usage error (exit status 2) naming it.
func TestPoliciesKVMissing(t *testing.T) {
	url := natstest.Start(t).URL()
	run := func(source string) error {
		m := NewMain()
		m.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
		if err := m.ParseFlags([]string{"--http", "127.0.0.1:0", "--nats-url", url, "--policies", source}, func(string) string { return "" }); err != nil {
			return err
		}
		defer m.Close()
		return m.Run(context.Background())
	}
	putKV(t, jetStreamOf(t, url), "limits", "bad", brokenPolicies)
	for source, want := range map[string]string{
		"kv:nobucket/chat": "bucket nobucket not found",
		"kv:limits/nokey":  "key nokey not found in bucket limits",
		"kv:limits/bad":    "kv:limits/bad:6: policies[0].window",
		"kv:limits":        "want kv:BUCKET/KEY",
	} {
		err := run(source)
		var usage *UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("--policies %s: %v; want a one-line usage error saying %q", source, err, want)
		}
	}
}

// A snapshot saved after a reload is labelled with the new policies: a
// restart under the old ones ignores it (and replays the stream), one
// under the new ones loads it.
func TestPoliciesReloadSnapshots(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(path, []byte(floodPolicies(3)), 0o644)
	args := []string{"--data-dir", dir, "--snapshot-interval", "50ms", "--policies", path}
	tm := startMain(t, args...)
	tm.aliceFloods(4)
	writeAtomically(t, path, floodPolicies(10))
	tm.waitLimit(10)
	tm.Close() // saves a last snapshot

	os.WriteFile(path, []byte(floodPolicies(10)), 0o644)
	tm = startMain(t, args...)
	if got := tm.metric("chatpulse_restore_seconds"); got <= 0 {
		t.Error("the snapshot saved after the reload to limit 10 was not loaded under limit 10")
	}
	if allowed, count := tm.floodCheck(); !allowed || count != 4 {
		t.Errorf("from the snapshot: allowed %v with count %d; want allowed, 4", allowed, count)
	}
	tm.Close()

	os.WriteFile(path, []byte(floodPolicies(3)), 0o644)
	tm = startMain(t, args...)
	if got := tm.metric("chatpulse_restore_seconds"); got > 0 {
		t.Error("a snapshot of limit 10 loaded under limit 3")
	}
	if allowed, count := tm.floodCheck(); allowed || count != 4 {
		t.Errorf("after the replay: allowed %v with count %d; want denied, 4", allowed, count)
	}
}

// Reloads while events flow, snapshots are taken and checks are asked: a
// policy whose limit alone changes counts every message, whichever version
// was in force when it came (run under -race, this is also the test that
// a reload shares nothing unguarded with ingest, snapshots and checks).
func TestPoliciesReloadWhileRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(path, []byte(floodPolicies(3)), 0o644)
	tm := startMainWith(t, func(m *Main) { m.policyPoll = 20 * time.Millisecond },
		"--policies", path, "--snapshot-interval", "20ms")
	const n = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			tm.nc.Publish("chat.lobby.alice", fmt.Appendf(nil, `{"room":"lobby","user":"alice","text":"spam %d"}`, i))
		}
		tm.nc.Flush()
	}()
	for limit := 4; limit < 12; limit++ {
		writeAtomically(t, path, floodPolicies(limit))
		tm.waitLimit(limit)
		tm.floodCheck()
	}
	<-done
	wait.For(t, 20*time.Second, func() error {
		if _, count := tm.floodCheck(); count != n {
			return fmt.Errorf("flood counts %d of %d messages", count, n)
		}
		return nil
	})
	if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 0 {
		t.Errorf("reload errors: %v", got)
	}
}
