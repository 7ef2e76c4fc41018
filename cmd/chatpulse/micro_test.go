package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// microView asks a view over NATS (chatpulse.views.<view>) and returns the
// answer's JSON, or the micro error's code and description.
func microView(t *testing.T, nc *nats.Conn, view, body string) (answer any, code, desc string) {
	t.Helper()
	msg, err := nc.Request("chatpulse.views."+view, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", view, err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return nil, code, msg.Header.Get("Nats-Service-Error")
	}
	if err := json.Unmarshal(msg.Data, &answer); err != nil {
		t.Fatalf("%s: %v in %s", view, err, msg.Data)
	}
	return answer, "", ""
}

// Bots on the bus read the views of docs/contract.md section 3 as endpoints of
// the chatpulse micro service: the same answers as HTTP, and micro errors
// with code 400 for bad requests.
func TestMicroViews(t *testing.T) {
	clock := newFrozen()
	tm := startMainAt(t, clock.Now)
	now := clock.ms.Load()
	for i := range 6 {
		tm.publish("chat.x", fmt.Sprintf(`{"room":"dot.room","user":"u%d","ts":%d}`, i%3, now))
	}
	tm.waitReceived(6)
	for _, c := range []struct{ view, body, path string }{
		{"windows", ``, "/api/v1/windows"},
		{"overview", `{}`, "/api/v1/overview"},
		{"overview", `{"window":"5m","k":2}`, "/api/v1/overview?window=5m&k=2"},
		{"rooms", `{"limit":1}`, "/api/v1/rooms?limit=1"},
		{"room", `{"room":"dot.room","k":1,"window":"1h"}`, "/api/v1/rooms/" + url.PathEscape("dot.room") + "?k=1&window=1h"},
		{"user", `{"user":"u1"}`, "/api/v1/users/u1"},
	} {
		got, code, desc := microView(t, tm.nc, c.view, c.body)
		if code != "" {
			t.Errorf("%s %s: error %s %s", c.view, c.body, code, desc)
			continue
		}
		var want any
		tm.get(c.path, &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s:\n got %v\nwant %v", c.view, c.body, got, want)
		}
	}
	for _, c := range []struct{ view, body, want string }{
		{"overview", `{"k":0}`, `k must be an integer 1..100, got "0"`},
		{"overview", `{"k":1.5}`, "k: must be an integer"},
		{"overview", `{"window":"2m"}`, `unknown window "2m"; configured: 1m, 5m, 1h`},
		{"rooms", `{"limit":"10"}`, "limit: must be an integer"},
		{"room", `{}`, "room: must be 1..128 bytes, got 0"},
		{"room", `{"room":"\ud800"}`, "room: must be valid UTF-8"},
		{"user", `{"User":"u1"}`, `unknown field "User"`},
		{"overview", `[]`, "a view request is a JSON object"},
	} {
		_, code, desc := microView(t, tm.nc, c.view, c.body)
		if code != "400" || !strings.Contains(desc, c.want) {
			t.Errorf("%s %s: %s %q, want 400 naming %q", c.view, c.body, code, desc, c.want)
		}
	}
	// The endpoints are discoverable, as `nats micro info chatpulse` does.
	msg, err := tm.nc.Request("$SRV.INFO.chatpulse", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Endpoints []struct {
			Subject string `json:"subject"`
		} `json:"endpoints"`
	}
	json.Unmarshal(msg.Data, &info)
	var subjects []string
	for _, e := range info.Endpoints {
		subjects = append(subjects, e.Subject)
	}
	for _, want := range []string{"chatpulse.throttle.check", "chatpulse.views.windows", "chatpulse.views.overview", "chatpulse.views.rooms", "chatpulse.views.room", "chatpulse.views.user"} {
		if !slices.Contains(subjects, want) {
			t.Errorf("endpoint %s not in %v", want, subjects)
		}
	}
}
