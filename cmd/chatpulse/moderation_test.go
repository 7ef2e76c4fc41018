package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// actionAnswer is an action as the API shows it.
type actionAnswer struct {
	Kind     string  `json:"kind"`
	Room     string  `json:"room"`
	User     string  `json:"user"`
	Interval int64   `json:"interval_ms"`
	Until    *string `json:"until"`
	Actor    string  `json:"actor"`
}

// firstDecision is the first decision of a read-only check of user in
// room, with roles.
func (tm *testMain) firstDecision(room, user, roles string) (allowed bool, policy string, retry int64, exempt bool) {
	tm.t.Helper()
	var a struct {
		Allowed   bool `json:"allowed"`
		Decisions []struct {
			Policy       string `json:"policy"`
			RetryAfterMs int64  `json:"retry_after_ms"`
			Exempt       bool   `json:"exempt"`
		} `json:"decisions"`
	}
	body := fmt.Sprintf(`{"room":%q,"user":%q`, room, user)
	if roles != "" {
		body += `,"roles":[` + roles + `]`
	}
	if status := tm.post("/api/v1/throttle/check", body+"}", &a); status != http.StatusOK || len(a.Decisions) == 0 {
		tm.t.Fatalf("check %s: status %d, %+v", body, status, a)
	}
	d := a.Decisions[0]
	return a.Allowed, d.Policy, d.RetryAfterMs, d.Exempt
}

func (tm *testMain) actions() []actionAnswer {
	tm.t.Helper()
	var v struct {
		Actions []actionAnswer `json:"actions"`
	}
	tm.get("/api/v1/moderation", &v)
	return v.Actions
}

// Slow mode and timeouts set over the API take effect for the next check,
// name themselves in its decision, are listed with their expiry, are told
// on the audit trail, survive a restart, and end when lifted; a role they
// exempt is allowed and says so; bad input changes nothing.
func TestModeratorActions(t *testing.T) {
	url := natstest.Start(t).URL()
	dir := t.TempDir()
	tm := startMain(t, "--nats-url", url, "--data-dir", dir, "--instance", "mod")
	audit := make(chan *nats.Msg, 64)
	sub, _ := tm.nc.ChanSubscribe("chatpulse.moderation.>", audit)
	defer sub.Unsubscribe()
	tm.nc.Flush()

	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{}`},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"0s"}`},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"30s","for":"1m","until":"2099-01-01T00:00:00Z"}`},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"30s","until":"2001-01-01T00:00:00Z"}`},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"30s","colour":"red"}`},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"48h"}`},
		{"PUT", "/api/v1/rooms/bad%01room/slowmode", `{"interval":"30s"}`},
		{"PUT", "/api/v1/users/troll/timeout", `{"for":"-1m"}`},
		{"PUT", "/api/v1/users/troll/timeout", `{"interval":"1s"}`},
		{"PUT", "/api/v1/users/troll/timeout", `{"exempt_roles":["a b"]}`},
		// An action that would end as it starts, a room too long to lift,
		// and an empty room that would read as everywhere (issue 33).
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"30s","for":"0.4ms"}`},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"0.4ms"}`},
		{"PUT", "/api/v1/users/troll/timeout", `{"room":"` + strings.Repeat("r", 129) + `"}`},
		{"PUT", "/api/v1/users/troll/timeout", `{"room":""}`},
	} {
		resp := tm.do(c.method, c.path, c.body)
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Error == "" {
			t.Errorf("%s %s %s: status %d %q, want 400 with an error", c.method, c.path, c.body, resp.StatusCode, e.Error)
		}
	}
	if got := tm.actions(); len(got) != 0 {
		t.Fatalf("after bad requests only: %+v", got)
	}

	var a actionAnswer
	if status := tm.put("/api/v1/rooms/lobby/slowmode", `{"interval":"30s","for":"10m","actor":"mod-alice","exempt_roles":["moderator"]}`, &a); status != 200 || a.Interval != 30_000 || a.Until == nil || a.Actor != "mod-alice" {
		t.Fatalf("PUT slowmode: %d %+v", status, a)
	}
	if ok, policy, _, _ := tm.firstDecision("lobby", "alice", ""); !ok || policy != "slowmode" {
		t.Fatalf("slow mode, nothing posted: allowed %v, %s", ok, policy)
	}
	tm.publish("chat.lobby.alice", `{"room":"lobby","user":"alice","text":"hi"}`)
	tm.waitReceived(1)
	if ok, policy, retry, _ := tm.firstDecision("lobby", "alice", ""); ok || policy != "slowmode" || retry <= 0 || retry > 30_000 {
		t.Fatalf("slow mode, just posted: allowed %v, %s, retry %d", ok, policy, retry)
	}
	if ok, _, _, exempt := tm.firstDecision("lobby", "alice", `"moderator"`); !ok || !exempt {
		t.Fatalf("a moderator in slow mode: allowed %v, exempt %v", ok, exempt)
	}
	if status := tm.put("/api/v1/users/troll/timeout", `{"for":"1h","reason":"spam","actor":"mod-bob"}`, nil); status != 200 {
		t.Fatalf("PUT timeout: %d", status)
	}
	if ok, policy, retry, _ := tm.firstDecision("anywhere", "troll", ""); ok || policy != "timeout" || retry <= 59*60_000 {
		t.Fatalf("timed out: allowed %v, %s, retry %d", ok, policy, retry)
	}
	for q, want := range map[string]int{"?room=lobby": 2, "?room=elsewhere": 1, "?user=troll": 1, "?user=alice": 0} {
		var v struct{ Actions []actionAnswer }
		tm.get("/api/v1/moderation"+q, &v)
		if len(v.Actions) != want {
			t.Errorf("GET /api/v1/moderation%s: %+v, want %d", q, v.Actions, want)
		}
	}
	var active struct {
		Active []struct {
			Policy string  `json:"policy"`
			Until  *string `json:"until"`
		} `json:"active"`
	}
	tm.get("/api/v1/throttle/active", &active)
	if len(active.Active) != 2 || active.Active[0].Until == nil {
		t.Fatalf("active: %+v, want the slow mode and the timeout, with until", active)
	}
	for _, want := range []string{`"event":"set"`, `"event":"set"`} {
		select {
		case m := <-audit:
			if !strings.Contains(string(m.Data), want) {
				t.Fatalf("audit %s: %s, want %s", m.Subject, m.Data, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no audit entry %s", want)
		}
	}

	// A restart keeps them.
	tm.Close()
	tm = startMain(t, "--nats-url", url, "--data-dir", dir, "--instance", "mod")
	if got := tm.actions(); len(got) != 2 {
		t.Fatalf("after a restart: %+v", got)
	}
	if ok, policy, _, _ := tm.firstDecision("anywhere", "troll", ""); ok || policy != "timeout" {
		t.Fatalf("after a restart, timed out: allowed %v, %s", ok, policy)
	}
	// Lifted: the next check is allowed; lifting again is 404.
	if resp := tm.do("DELETE", "/api/v1/users/troll/timeout?actor=mod-bob", ""); resp.StatusCode != 200 {
		t.Fatalf("DELETE timeout: %d", resp.StatusCode)
	}
	if ok, _, _, _ := tm.firstDecision("anywhere", "troll", ""); !ok {
		t.Fatal("lifted, still denied")
	}
	if resp := tm.do("DELETE", "/api/v1/users/troll/timeout", ""); resp.StatusCode != 404 {
		t.Fatalf("DELETE again: %d, want 404", resp.StatusCode)
	}
	// A hostile value in the bucket is ignored, and nothing else changes.
	js, _ := jetstream.New(tm.nc)
	kv, err := js.KeyValue(context.Background(), "CHATPULSE_MODERATION")
	if err != nil {
		t.Fatal(err)
	}
	kv.Put(context.Background(), "timeout.eA", []byte(`{"kind":"timeout","user":"nope","until":null,"set":"2026-01-01T00:00:00Z"}`))
	kv.Put(context.Background(), "slowmode.zz", []byte(`not json`))
	wait.For(t, 10*time.Second, func() error {
		if n := strings.Count(tm.log.String(), "not valid; ignored"); n < 2 {
			return fmt.Errorf("%d hostile values logged, want 2", n)
		}
		return nil
	})
	if got := tm.actions(); len(got) != 1 || got[0].Kind != "slowmode" {
		t.Fatalf("after hostile values: %+v", got)
	}
}

// An action set on one member of a group holds for the very next check on
// every other member.
func TestModeratorActionsGroup(t *testing.T) {
	url := natstest.Start(t).URL()
	ms := startGroup(t, url, "mods", 3, nil)
	for i := range 20 {
		user := fmt.Sprint("u", i)
		if status := ms[i%3].put("/api/v1/users/"+user+"/timeout", `{"for":"10m"}`, nil); status != 200 {
			t.Fatalf("PUT: %d", status)
		}
		if ok, policy, _, _ := ms[(i+1)%3].firstDecision(fmt.Sprint("room-", i), user, ""); ok || policy != "timeout" {
			t.Fatalf("the next check of %s on another member: allowed %v, %s", user, ok, policy)
		}
	}
}

// put sends JSON with PUT and decodes the answer.
func (tm *testMain) put(path, body string, v any) int {
	tm.t.Helper()
	resp := tm.do(http.MethodPut, path, body)
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}
