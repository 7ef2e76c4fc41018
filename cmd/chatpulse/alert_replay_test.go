package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/throttle"
)

// A crossing is alerted once, however many times the stream is read: a
// restart replays the messages that crossed and keeps the key marked, but
// publishes no alert for them, nor for the next live message that is still
// over the limit.
func TestAlertNotRepeatedAfterRestart(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	defer ns.Shutdown()
	// Subscribed before either chatpulse starts: it sees what a replay
	// would publish.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	alerts := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe("chatpulse.alerts.throttle", alerts); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	noAlert := func(when string) {
		t.Helper()
		select {
		case m := <-alerts:
			t.Fatalf("%s: alert %s", when, m.Data)
		case <-time.After(300 * time.Millisecond):
		}
	}

	clock := newFrozen()
	now := clock.ms.Load()
	message := func(i int) string {
		return fmt.Sprintf(`{"room":"lobby","user":"alice","ts":%q}`, chat.Time(now-1000+int64(i)))
	}
	first := startMainAt(t, clock.Now, "--nats-url", ns.ClientURL())
	for i := range 11 {
		first.publish("chat.lobby.alice", message(i))
	}
	first.waitReceived(11)
	select {
	case <-alerts:
	case <-time.After(10 * time.Second):
		t.Fatal("no alert for the 11th message")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	again := startMainAt(t, clock.Now, "--nats-url", ns.ClientURL())
	again.waitReceived(11)
	noAlert("after replaying the crossing")
	again.publish("chat.lobby.alice", message(11))
	again.waitReceived(12)
	noAlert("a live message still over the limit")
	var active struct {
		Active []throttle.Active `json:"active"`
	}
	again.get("/api/v1/throttle/active", &active)
	if len(active.Active) != 1 || active.Active[0].User != "alice" || active.Active[0].Count != 12 || active.Active[0].Since != chat.Time(now-1000+10) {
		t.Fatalf("active after restart: %+v", active.Active)
	}
}
