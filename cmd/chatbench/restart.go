package main

// restart measures what a snapshot saves a restart: the time from starting
// chatpulse to its /readyz answering 200, with the snapshot a clean stop
// left and with a full replay of the stream (--snapshot-interval 0), side
// by side in one run, against one NATS server, on the same events.

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func restartCmd(args []string) error {
	fs := flag.NewFlagSet("restart", flag.ExitOnError)
	n := fs.Int("n", 600_000, "events, spread over the last 6 days")
	rooms := fs.Int("rooms", 800, "rooms")
	users := fs.Int("users", 50_000, "users (Zipf)")
	windows := fs.String("windows", "1m,1h,7d:1h", "chatpulse's --windows")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	crash := fs.Bool("crash", false, "after a crash: chatpulse's embedded NATS server, snapshots every 2 s, and SIGKILL instead of a clean stop")
	fs.Parse(args)
	if *crash {
		return crashCmd(*bin, *n, *rooms, *users, *windows)
	}

	dir, url, done, err := setUp("restart", bin)
	if err != nil {
		return err
	}
	defer done()
	start := func(extra ...string) (*process, time.Duration, error) {
		begin := time.Now()
		p, err := startChatpulse(*bin, dir, append([]string{"--nats-url", url, "--windows", *windows, "--instance", "bench"}, extra...)...)
		return p, time.Since(begin), err
	}

	// Load: a chatpulse takes the events in, then stops cleanly, leaving
	// its last snapshot.
	p, _, err := start("--snapshot-interval", "1h")
	if err != nil {
		return err
	}
	if err := publishSpread(url, *n, *rooms, *users); err != nil {
		p.stop()
		return err
	}
	if err := received(p, *n, 10*time.Minute); err != nil {
		p.stop()
		return err
	}
	var st struct{ Pairs int }
	if m, err := scrape(p.url + "/metrics"); err == nil {
		st.Pairs = int(m["chatpulse_tracked_room_users"])
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.cmd.Wait()

	withSnap, ready, err := start("--snapshot-interval", "1h")
	if err != nil {
		return err
	}
	m, _ := scrape(withSnap.url + "/metrics")
	withSnap.cmd.Process.Signal(syscall.SIGKILL) // leaves the snapshot as it was
	withSnap.cmd.Wait()
	full, fullReady, err := start("--snapshot-interval", "0")
	if err != nil {
		return err
	}
	full.stop()

	fmt.Printf("%d events over 6 days (%d rooms, %d users, %d tracked pairs), windows %s\n\n", *n, *rooms, *users, st.Pairs, *windows)
	fmt.Printf("start to /readyz, with the snapshot: %v (loading it: %.3f s; %.1f MB, %.1f bytes per tracked pair)\n",
		ready.Round(time.Millisecond), m["chatpulse_restore_seconds"], m["chatpulse_snapshot_bytes"]/1e6, m["chatpulse_snapshot_bytes"]/float64(max(st.Pairs, 1)))
	fmt.Printf("start to /readyz, replaying the stream: %v\n", fullReady.Round(time.Millisecond))
	fmt.Printf("ratio: %.3f\n", ready.Seconds()/fullReady.Seconds())
	return nil
}

// publishSpread publishes n events on chat.<room>.<user>, their ts spread
// over the last 6 days, users Zipf-distributed, each acknowledged.
func publishSpread(url string, n, rooms, users int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<15))
	r := rand.New(rand.NewPCG(11, 12))
	zipf := rand.NewZipf(r, 1.1, 1, uint64(users-1))
	now := time.Now().UnixMilli()
	span := int64(6 * 24 * time.Hour / time.Millisecond)
	for i := range n {
		room, user := r.IntN(rooms), zipf.Uint64()
		ts := now - span + int64(i)*span/int64(n) // oldest first, as a stream is
		data := fmt.Appendf(nil, `{"room":"room-%d","user":"user-%d","ts":%d,"text":"hello"}`, room, user, ts)
		for {
			_, err := js.PublishAsync(fmt.Sprintf("chat.room-%d.user-%d", room, user), data)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return err
			}
			<-js.PublishAsyncComplete()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(5 * time.Minute):
		return errors.New("publishes not acknowledged")
	}
}

// crashCmd is restart after SIGKILL with the embedded NATS server, as a
// single chatpulse runs by default: the server recovers its store (not
// closed cleanly) before chatpulse loads the snapshot of at most 2 s ago
// and replays the tail. Each start is killed in turn, so the replay's
// start recovers the store as the snapshot's did.
func crashCmd(bin string, n, rooms, users int, windows string) error {
	dir, _, done, err := setUp("crash", &bin)
	if err != nil {
		return err
	}
	defer done()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	natsAddr := l.Addr().String()
	l.Close()
	start := func(interval string) (*process, time.Duration, error) {
		begin := time.Now()
		p, err := startChatpulse(bin, dir, "--nats-listen", natsAddr, "--data-dir", filepath.Join(dir, "data"),
			"--windows", windows, "--instance", "bench", "--snapshot-interval", interval)
		return p, time.Since(begin), err
	}
	kill := func(p *process) { p.cmd.Process.Signal(syscall.SIGKILL); p.cmd.Wait() }

	p, _, err := start("2s")
	if err != nil {
		return err
	}
	if err := publishSpread("nats://"+natsAddr, n, rooms, users); err != nil {
		kill(p)
		return err
	}
	received := time.Time{}
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		m, err := scrape(p.url + "/metrics")
		if err == nil && received.IsZero() && m["chatpulse_events_received_total"] >= float64(n) {
			received = time.Now()
		}
		// A snapshot saved after the last event: the crash loses none of it.
		if age := m["chatpulse_snapshot_age_seconds"]; !received.IsZero() && age > 0 && age < time.Since(received).Seconds() {
			break
		}
		if time.Now().After(deadline) {
			kill(p)
			return errors.New("chatpulse did not take every event in and save a snapshot of them")
		}
	}
	kill(p)
	// The store as the crash left it, for the server's recovery alone.
	crashed := filepath.Join(dir, "crashed")
	if err := os.CopyFS(crashed, os.DirFS(filepath.Join(dir, "data"))); err != nil {
		return err
	}

	withSnap, ready, err := start("2s")
	if err != nil {
		return err
	}
	m, _ := scrape(withSnap.url + "/metrics")
	kill(withSnap)
	full, fullReady, err := start("0")
	if err != nil {
		return err
	}
	kill(full)
	recovered, err := recoverStore(crashed)
	if err != nil {
		return err
	}
	fmt.Printf("%d events over 6 days (%d rooms, %d users), windows %s, embedded NATS, each start after a SIGKILL\n\n", n, rooms, users, windows)
	fmt.Printf("start to /readyz, with the snapshot: %v (loading it: %.3f s; %.1f MB)\n",
		ready.Round(time.Millisecond), m["chatpulse_restore_seconds"], m["chatpulse_snapshot_bytes"]/1e6)
	fmt.Printf("start to /readyz, replaying the stream: %v\n", fullReady.Round(time.Millisecond))
	fmt.Printf("ratio: %.3f\n", ready.Seconds()/fullReady.Seconds())
	fmt.Printf("the NATS server alone, recovering the crashed store until it listens: %v (%.3f of the replay's start: no start can be quicker)\n",
		recovered.Round(time.Millisecond), recovered.Seconds()/fullReady.Seconds())
	return nil
}

// recoverStore is how long a NATS server (as chatpulse embeds it) takes to
// start on the JetStream store in dir.
func recoverStore(dir string) (time.Duration, error) {
	begin := time.Now()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		return 0, err
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Minute) {
		return 0, errors.New("the NATS server did not recover the crashed store")
	}
	return time.Since(begin), nil
}
