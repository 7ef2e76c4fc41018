package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/throttle"
)

type checkAnswer struct {
	Allowed   bool   `json:"allowed"`
	AsOf      string `json:"as_of"`
	Room      string `json:"room"`
	User      string `json:"user"`
	Decisions []struct {
		Policy       string `json:"policy"`
		Scope        string `json:"scope"`
		Algorithm    string `json:"algorithm"`
		Mode         string `json:"mode"`
		Allowed      bool   `json:"allowed"`
		Count        int64  `json:"count"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	} `json:"decisions"`
}

func (a checkAnswer) decision(policy string) (d struct {
	Allowed             bool
	Count, Limit, Retry int64
	Mode                string
}) {
	for _, x := range a.Decisions {
		if x.Policy == policy {
			d.Allowed, d.Count, d.Limit, d.Retry, d.Mode = x.Allowed, x.Count, x.Limit, x.RetryAfterMs, x.Mode
		}
	}
	return d
}

// The 11th message of a user in a room within 10 s flips the default
// policy, over HTTP and over NATS alike, and exactly one alert goes out.
func TestThrottleEndToEnd(t *testing.T) {
	tm := startMain(t)
	alerts := make(chan *nats.Msg, 16)
	sub, _ := tm.nc.ChanSubscribe("chatpulse.alerts.throttle", alerts)
	defer sub.Unsubscribe()
	tm.nc.Flush()

	body := `{"room":"lobby","user":"alice"}`
	for i := range 10 {
		var a checkAnswer
		tm.post("/api/v1/throttle/check", body, &a)
		if !a.Allowed || a.decision("user_room_flood").Count != int64(i) {
			t.Fatalf("before message %d: %+v", i+1, a)
		}
		tm.publish("chat.lobby.alice", `{"room":"lobby","user":"alice","text":"hi `+fmt.Sprint(i)+`"}`)
		tm.waitReceived(i + 1)
	}
	var a checkAnswer
	tm.post("/api/v1/throttle/check", body, &a)
	d := a.decision("user_room_flood")
	if a.Allowed || d.Allowed || d.Count != 10 || d.Limit != 10 || d.Retry <= 0 || d.Retry > 10_000 {
		t.Fatalf("after 10 messages: %+v", a)
	}
	if a.Room != "lobby" || a.User != "alice" || a.AsOf == "" || len(a.Decisions) != 2 { // repeat only applies with text
		t.Fatalf("answer shape: %+v", a)
	}

	// The same over NATS request-reply.
	reply, err := tm.nc.Request("chatpulse.throttle.check", []byte(body), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var overNATS checkAnswer
	if err := json.Unmarshal(reply.Data, &overNATS); err != nil || overNATS.Allowed || overNATS.decision("user_room_flood").Count != 10 {
		t.Fatalf("over NATS: %s (%v)", reply.Data, err)
	}
	bad, err := tm.nc.Request("chatpulse.throttle.check", []byte(`{"room":""}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Header.Get("Nats-Service-Error-Code") != "400" || bad.Header.Get("Nats-Service-Error") == "" {
		t.Fatalf("malformed request over NATS: headers %v", bad.Header)
	}

	tm.published(tm.nc) // an alert for the first ten would be here by now
	select {
	case m := <-alerts:
		t.Fatalf("alert before the 11th message: %s", m.Data)
	default:
	}
	tm.publish("chat.lobby.alice", `{"room":"lobby","user":"alice","text":"eleven"}`)
	select {
	case m := <-alerts:
		var alert map[string]any
		json.Unmarshal(m.Data, &alert)
		if alert["policy"] != "user_room_flood" || alert["room"] != "lobby" || alert["user"] != "alice" || alert["count"] != 11.0 || alert["limit"] != 10.0 || alert["at"] == nil {
			t.Fatalf("alert: %s", m.Data)
		}
		if !strings.HasPrefix(m.Header.Get(nats.MsgIdHdr), `user_room_flood|"lobby"|"alice"|`) {
			t.Fatalf("alert message id: %q", m.Header.Get(nats.MsgIdHdr))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no alert for the 11th message")
	}
	tm.publish("chat.lobby.alice", `{"room":"lobby","user":"alice","text":"twelve"}`)
	tm.waitReceived(12)
	tm.published(tm.nc)
	select {
	case m := <-alerts:
		t.Fatalf("a second alert for the same crossing: %s", m.Data)
	default:
	}

	var active struct {
		AsOf   string            `json:"as_of"`
		Active []throttle.Active `json:"active"`
	}
	tm.get("/api/v1/throttle/active", &active)
	if len(active.Active) != 1 || active.Active[0].Policy != "user_room_flood" || active.Active[0].User != "alice" || active.Active[0].Count != 12 {
		t.Fatalf("active: %+v", active)
	}
}

// Shadow policies are decided and reported, and never deny.
func TestShadowPolicy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policies.yaml")
	os.WriteFile(file, []byte(`policies:
  - name: strict_shadow
    scope: room
    algorithm: token_bucket
    limit: 1
    window: 1m
    mode: shadow
  - name: roomy
    scope: user
    algorithm: gcra
    limit: 100
    window: 1m
`), 0o644)
	tm := startMain(t, "--policies", file)
	alerts := make(chan *nats.Msg, 16)
	sub, _ := tm.nc.ChanSubscribe("chatpulse.alerts.throttle", alerts)
	defer sub.Unsubscribe()
	for range 5 {
		tm.publish("chat.dev.bob", `{"room":"dev","user":"bob"}`)
	}
	tm.waitReceived(5)
	var a checkAnswer
	tm.post("/api/v1/throttle/check", `{"room":"dev","user":"bob"}`, &a)
	d := a.decision("strict_shadow")
	if !a.Allowed || d.Allowed || d.Mode != "shadow" || len(a.Decisions) != 2 {
		t.Fatalf("shadow: %+v", a)
	}
	if got := tm.metric(`chatpulse_throttle_decisions_total{policy="strict_shadow",result="shadow_denied"}`); got != 1 {
		t.Fatalf("shadow_denied decisions = %v", got)
	}
	tm.published(tm.nc)
	select {
	case m := <-alerts:
		t.Fatalf("a shadow policy alerted: %s", m.Data)
	default:
	}
}

// Checks while events flow, from many goroutines, for the race detector.
func TestConcurrentChecks(t *testing.T) {
	tm := startMain(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				var a checkAnswer
				tm.post("/api/v1/throttle/check", fmt.Sprintf(`{"room":"r%d","user":"u%d","text":"x"}`, g, i%5), &a)
				if len(a.Decisions) != 3 {
					t.Errorf("decisions: %+v", a)
					return
				}
			}
		})
	}
	for i := range 500 {
		tm.publish(fmt.Sprintf("chat.r%d.u", i%4), fmt.Sprintf(`{"room":"r%d","user":"u%d","text":"x"}`, i%4, i%5))
	}
	wg.Wait()
	tm.waitReceived(500)
}
