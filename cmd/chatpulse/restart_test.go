package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// A restart on the same data directory rebuilds every window from the
// stream: the views equal the oracle's again.
func TestRestartRebuilds(t *testing.T) {
	clock := newFrozen()
	dir := t.TempDir()
	tm := startMainAt(t, clock.Now, "--data-dir", dir)
	now := clock.ms.Load()
	evs := randomTrace(rand.New(rand.NewPCG(3, 4)), now, 1500)
	o, _ := tm.publishTrace(now, evs)
	tm.compareAll(o, now, evs)
	if err := tm.Close(); err != nil {
		t.Fatal(err)
	}

	again := startMainAt(t, clock.Now, "--data-dir", dir)
	again.compareAll(o, now, evs)
}

// freePort finds a TCP port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The built binary, killed without a chance to clean up, loses nothing:
// the next start replays the stream and counts everything again.
func TestKilledBinaryRecovers(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	httpPort, natsPort := freePort(t), freePort(t)
	tm := &testMain{t: t, url: fmt.Sprint("http://127.0.0.1:", httpPort)}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--data-dir", dir, "--http", fmt.Sprint("127.0.0.1:", httpPort), "--nats-listen", fmt.Sprint("127.0.0.1:", natsPort))
		cmd.Stderr = testWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		tm.waitReady()
		return cmd
	}
	cmd := start()
	nc, err := nats.Connect(fmt.Sprint("nats://127.0.0.1:", natsPort))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	// Publish with acks, so that what the stream holds is known; events
	// carry no ts, so their time is when the stream took them, replay or not.
	want := map[string]int64{}
	for i := range 500 {
		room := fmt.Sprint("room-", i%7)
		if _, err := js.Publish(context.Background(), "chat."+room+".u", fmt.Appendf(nil, `{"room":%q,"user":"u%d"}`, room, i%13)); err != nil {
			t.Fatal(err)
		}
		want[room]++
	}
	nc.Close()
	tm.waitReceived(500)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	cmd = start()
	var rooms aggregator.Rooms
	tm.get("/api/v1/rooms?window=5m", &rooms)
	got := map[string]int64{}
	for _, r := range rooms.Rooms {
		got[r.Room] = r.Messages
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after SIGKILL and restart: %v, want %v", got, want)
	}

	// SIGTERM stops it cleanly.
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// An external NATS server goes away mid-stream and comes back on the same
// store: with JetStream, chatpulse resumes and the final counts are exact.
func TestExternalNATSRestart(t *testing.T) {
	ns := natstest.Start(t)
	url := ns.URL()
	tm := startMain(t, "--nats-url", url)

	pub, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	js, _ := jetstream.New(pub)
	// Every event is published until the stream acks it; the message id
	// makes a retry of one that was stored after all a duplicate the stream
	// drops, so exactly total events are stored.
	const total = 600
	publish := func(i int) {
		msg := nats.NewMsg("chat.lobby.u")
		msg.Data = fmt.Appendf(nil, `{"room":"lobby","user":"u%d"}`, i%10)
		msg.Header.Set(nats.MsgIdHdr, strconv.Itoa(i))
		wait.For(t, 30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				return fmt.Errorf("event %d not acked by the stream: %w", i, err)
			}
			return nil
		})
	}
	for i := range total / 2 {
		publish(i)
	}
	ns.Stop(0)
	wait.For(t, 10*time.Second, func() error { // chatpulse notices the server is gone
		if !strings.Contains(tm.log.String(), "nats disconnected") {
			return errors.New("chatpulse has not logged that NATS went away")
		}
		return nil
	})
	ns.Restart(0) // on its store
	for i := total / 2; i < total; i++ {
		publish(i)
	}
	wait.For(t, 60*time.Second, func() error {
		var v aggregator.Room
		tm.get("/api/v1/rooms/lobby", &v)
		if v.Messages < total {
			return fmt.Errorf("lobby counts %d of %d events", v.Messages, total)
		}
		return nil
	})
	var v aggregator.Room
	tm.get("/api/v1/rooms/lobby", &v)
	if v.Messages != total {
		t.Fatalf("lobby counted %d, want exactly %d", v.Messages, total)
	}
}

// Core mode: a plain subscription, ready at once, no replay.
func TestCoreMode(t *testing.T) {
	tm := startMain(t, "--jetstream=false")
	for i := range 20 {
		tm.publish("chat.lobby.alice", fmt.Sprintf(`{"room":"lobby","user":"u%d"}`, i%4))
	}
	tm.waitReceived(20)
	var v aggregator.Room
	tm.get("/api/v1/rooms/lobby", &v)
	if v.Messages != 20 || v.DistinctUsers != 4 {
		t.Fatalf("lobby: %+v", v)
	}
	if tm.metric("chatpulse_events_dropped_total") != 0 {
		t.Fatal("dropped messages")
	}
	if _, err := os.Stat(filepath.Join(tm.Config.DataDir, "jetstream")); err == nil {
		t.Fatal("core mode wrote a JetStream store")
	}
}

// --nats-url carries the credentials of the server it names: user and
// password, or a token.
func TestExternalNATSAuth(t *testing.T) {
	for name, tc := range map[string]struct {
		opts func(*server.Options)
		url  func(port int) string
	}{
		"user and password": {func(o *server.Options) { o.Username, o.Password = "chat", "s3cret" },
			func(p int) string { return fmt.Sprintf("nats://chat:s3cret@127.0.0.1:%d", p) }},
		"token": {func(o *server.Options) { o.Authorization = "t0ken" },
			func(p int) string { return fmt.Sprintf("nats://t0ken@127.0.0.1:%d", p) }},
	} {
		t.Run(name, func(t *testing.T) {
			port := natstest.Start(t, tc.opts).Node(0).Addr().(*net.TCPAddr).Port // stopped after chatpulse's own cleanup
			url := tc.url(port)
			tm := startMain(t, "--nats-url", url)
			if got := tm.PublishURL(); got != fmt.Sprintf("nats://***@127.0.0.1:%d", port) {
				t.Fatalf("the logged URL shows the secret: %s", got)
			}
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Publish("chat.lobby.alice", []byte(`{"room":"lobby","user":"alice"}`))
			nc.Flush()
			tm.waitReceived(1)
		})
	}
	// The wrong password is an error, not a hang.
	ns := natstest.Start(t, func(o *server.Options) { o.JetStream, o.Username, o.Password = false, "chat", "right" }).Node(0)
	m := NewMain()
	m.Log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	m.ParseFlags([]string{"--http", "127.0.0.1:0", "--nats-url", fmt.Sprintf("nats://chat:wrong@127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)}, func(string) string { return "" })
	err := m.Run(context.Background())
	m.Close()
	if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("wrong password: %v", err)
	}
}
