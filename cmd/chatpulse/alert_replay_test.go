package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/throttle"
)

// A crossing is alerted once, however a restart rebuilds the state: a full
// replay of the messages that crossed, or the snapshot saved at the clean
// stop, keeps the key marked but publishes no alert for them, nor for the
// next live message that is still over the limit.
func TestAlertNotRepeatedAfterRestart(t *testing.T) {
	for _, c := range []struct {
		name, interval string
		replayed       int // messages the restart reads again
	}{
		{"FullReplay", "0", 11},
		{"Snapshot", "30s", 0},
	} {
		t.Run(c.name, func(t *testing.T) { testAlertNotRepeated(t, c.interval, c.replayed) })
	}
}

func testAlertNotRepeated(t *testing.T, interval string, replayed int) {
	url := natstest.Start(t).URL()
	// Subscribed before either chatpulse starts: it sees what a replay
	// would publish.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	alerts := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe("chatpulse.alerts.throttle", alerts); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	// noAlert: tm published no alert for what it has received.
	noAlert := func(tm *testMain, when string) {
		t.Helper()
		tm.published(nc)
		select {
		case m := <-alerts:
			t.Fatalf("%s: alert %s", when, m.Data)
		default:
		}
	}

	clock := newFrozen()
	now := clock.ms.Load()
	message := func(i int) string {
		return fmt.Sprintf(`{"room":"lobby","user":"alice","ts":%q}`, chat.Time(now-1000+int64(i)))
	}
	args := []string{"--nats-url", url, "--snapshot-interval", interval}
	first := startMainAt(t, clock.Now, args...)
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

	again := startMainAt(t, clock.Now, args...)
	again.waitReceived(replayed)
	noAlert(again, "after the restart")
	if got := again.metric("chatpulse_events_received_total"); got != float64(replayed) {
		t.Fatalf("the restart read %v messages again, want %d", got, replayed)
	}
	again.publish("chat.lobby.alice", message(11))
	again.waitReceived(replayed + 1)
	noAlert(again, "a live message still over the limit")
	var active struct {
		Active []throttle.Active `json:"active"`
	}
	again.get("/api/v1/throttle/active", &active)
	if len(active.Active) != 1 || active.Active[0].User != "alice" || active.Active[0].Count != 12 || active.Active[0].Since != chat.Time(now-1000+10) {
		t.Fatalf("active after restart: %+v", active.Active)
	}
}
