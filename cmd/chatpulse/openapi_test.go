package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// The OpenAPI document at /api/v1/openapi.json describes what chatpulse
// really answers: a running chatpulse, fed events, is asked every endpoint
// with good and bad parameters, and every answer (status, content type,
// body) must validate against the document it serves. Where the document
// refuses a request, chatpulse must refuse it too (400). Every answer the
// document lists turns up at least once, but those that cannot here.
func TestOpenAPI(t *testing.T) {
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	// An hour-long flood policy, so that the active key is still active
	// when the test asks, however slow the machine.
	os.WriteFile(policies, []byte(`policies:
  - name: flood
    scope: user_in_room
    algorithm: sliding_window
    limit: 3
    window: 1h
  - name: burst
    scope: user
    algorithm: token_bucket
    limit: 100
    window: 1m
    cost: {messages: 1, mentions: 2, links: 5}
  - name: repeated
    scope: user
    algorithm: repeat
    limit: 1
    window: 1m
    mode: shadow
  - name: raid
    scope: room
    algorithm: join_wave
    limit: 1
    window: 1h
    act: [lock]
  - name: surge
    scope: room
    algorithm: spike
    window: 1m
    baseline: 1h
    min_messages: 3
    min_users: 2
  - name: wave
    scope: room
    algorithm: similar
    limit: 5
    window: 1h
    similarity: 0.9
`), 0o644)
	tm := startMain(t, "--windows", "1m,1h", "--policies", policies)
	for i := range 5 {
		tm.publish("chat.lobby.alice", fmt.Sprintf(`{"room":"lobby","user":"alice","text":"buy now %d"}`, i%2))
	}
	tm.publish("chat.lobby.bob", `{"room":"lobby","user":"bob","text":"hi"}`)
	tm.publish("chat.a%2Fb.bob", `{"room":"a/b","user":"bob","text":"hi"}`)
	tm.publish("chat.lobby.newcomer", `{"room":"lobby","user":"newcomer","type":"join"}`) // joins and leaves, for their fields
	tm.publish("chat.lobby.newcomer", `{"room":"lobby","user":"newcomer","type":"leave"}`)
	tm.publish("chat.x", `not json`)
	tm.publish("chat.x", `{"user":"nobody"}`)
	tm.waitReceived(11)
	// Wait for the counts and the throttle, fed on goroutines of their own,
	// so that the answers below have rows, talkers and an active key for
	// the document's item schemas to check.
	wait.For(t, 30*time.Second, func() error {
		var active struct{ Active []any }
		tm.get("/api/v1/throttle/active", &active)
		if accepted := tm.metric("chatpulse_events_accepted_total"); accepted != 9 || len(active.Active) != 2 {
			return fmt.Errorf("%v of 9 events accepted and %d keys active, want the flood key and the spike's room", accepted, len(active.Active))
		}
		return nil
	})

	doc := loadOpenAPI(t, tm.url+"/api/v1/openapi.json")
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	v := &apiValidator{t: t, router: router, seen: map[string]bool{}}

	long := strings.Repeat("r", 129)
	for _, c := range []apiCase{
		{"GET", "/api/v1/windows", "", 200, ""},
		{"GET", "/api/v1/overview", "", 200, ""},
		{"GET", "/api/v1/overview?window=1h&k=1", "", 200, ""},
		{"GET", "/api/v1/overview?k=0", "", 400, ""},
		{"GET", "/api/v1/overview?k=101", "", 400, ""},
		{"GET", "/api/v1/overview?k=ten", "", 400, ""},
		{"GET", "/api/v1/overview?window=2m", "", 400, "the windows are configured"},
		{"GET", "/api/v1/rooms", "", 200, ""},
		{"GET", "/api/v1/rooms?window=1h&limit=1", "", 200, ""},
		{"GET", "/api/v1/rooms?limit=0", "", 400, ""},
		{"GET", "/api/v1/rooms?limit=1001", "", 400, ""},
		{"GET", "/api/v1/rooms?window=1d", "", 400, "the windows are configured"},
		{"GET", "/api/v1/rooms/lobby?k=1", "", 200, ""},
		{"GET", "/api/v1/rooms/a%2Fb?window=1h", "", 200, ""},
		{"GET", "/api/v1/rooms/quiet", "", 200, ""}, // zeros and nulls
		{"GET", "/api/v1/rooms/lobby?k=0", "", 400, ""},
		{"GET", "/api/v1/rooms/lobby?window=2m", "", 400, "the windows are configured"},
		{"GET", "/api/v1/rooms/" + long, "", 400, ""},
		{"GET", "/api/v1/rooms/bad%01room", "", 400, ""},
		{"GET", "/api/v1/users/alice", "", 200, ""},
		{"GET", "/api/v1/users/nobody?window=1h", "", 200, ""},
		{"GET", "/api/v1/users/alice?window=5m", "", 400, "the windows are configured"},
		{"GET", "/api/v1/users/" + long, "", 400, ""},
		{"GET", "/api/v1/users/del%7F", "", 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"alice","text":"buy now 1"}`, 200, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"carol"}`, 200, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"erin","text":"see http://x","mentions":["bob","bob"]}`, 200, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"erin","mentions":"bob"}`, 400, ""},
		{"POST", "/api/v1/throttle/check", `not json`, 400, ""},
		{"POST", "/api/v1/throttle/check", ``, 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby"}`, 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"","user":"carol"}`, 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"carol","colour":"red"}`, 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"carol","text":7}`, 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"carol"} {}`, 400, "kin-openapi reads the first JSON value only"},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"dave","consume":true,"id":"m-1"}`, 200, ""},
		{"POST", "/api/v1/throttle/check", `[{"room":"lobby","user":"dave","consume":true,"id":"m-2"},{"room":"lobby","user":"erin"}]`, 200, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"dave","consume":true}`, 400, "the schema cannot say that consume: true needs an id"},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"dave","consume":true,"id":7}`, 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"dave","consume":"yes","id":"m-3"}`, 400, ""},
		{"POST", "/api/v1/throttle/check", `[]`, 400, ""},
		{"POST", "/api/v1/throttle/check", `[{"room":"lobby","user":"dave"},{"room":"lobby"}]`, 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"dave","roles":["moderator"]}`, 200, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"dave","roles":["a b"]}`, 400, ""},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"30s","for":"10m","actor":"mod","exempt_roles":["moderator"]}`, 200, ""},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"interval":"0s"}`, 400, "the schema does not parse durations"},
		{"PUT", "/api/v1/rooms/lobby/slowmode", `{"for":"10m"}`, 400, "the schema cannot say that a slow mode needs its interval"},
		{"PUT", "/api/v1/users/troll/timeout", `{"until":"2099-01-01T00:00:00Z","reason":"spam"}`, 200, ""},
		{"PUT", "/api/v1/users/troll/timeout", `{"for":"1m","until":"2099-01-01T00:00:00Z"}`, 400, "the schema cannot say that for and until exclude each other"},
		{"GET", "/api/v1/moderation", "", 200, ""},
		{"GET", "/api/v1/moderation?room=lobby&user=troll", "", 200, ""},
		{"GET", "/api/v1/moderation?room=bad%01", "", 400, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"troll"}`, 200, ""},
		{"GET", "/api/v1/throttle/active", "", 200, ""},
		{"DELETE", "/api/v1/users/troll/timeout?actor=mod", "", 200, ""},
		{"DELETE", "/api/v1/users/troll/timeout", "", 404, ""},
		{"DELETE", "/api/v1/users/troll/timeout?room=bad%01", "", 400, ""},
		{"DELETE", "/api/v1/rooms/lobby/slowmode", "", 200, ""},
		{"DELETE", "/api/v1/rooms/lobby/slowmode", "", 404, ""},
		{"DELETE", "/api/v1/rooms/bad%01room/slowmode", "", 400, ""},
		{"GET", "/api/v1/throttle/active", "", 200, ""},
		{"GET", "/api/v1/throttle/policies", "", 200, ""},
		{"GET", "/api/v1/group", "", 404, ""}, // standalone
		{"GET", "/api/v1/act", "", 404, ""},   // no --act
		{"POST", "/api/v1/matrix/antispam/ping", `{"id":"AbCdEfGh"}`, 200, ""},
		{"POST", "/api/v1/matrix/antispam/ping", `{}`, 400, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", synapseMessage("$m1"), 200, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", synapseMessage("$m2"), 200, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", synapseMessage("$m3"), 200, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", synapseMessage("$m4"), 429, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", `{"event":{"type":"m.reaction","event_id":"$r","room_id":"!x:hs","sender":"@a:hs","origin_server_ts":1,"content":{}}}`, 200, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", `{"event":`, 400, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", `{"event":{"type":"m.room.message","room_id":"!x:hs","sender":"@a:hs","origin_server_ts":1,"content":{"body":"hi"}}}`, 400, "the schema cannot say that a message needs its event_id"},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", synapseJoin("$j1", "@a:remote"), 200, ""},
		{"POST", "/api/v1/matrix/antispam/check_event_for_spam", synapseJoin("$j2", "@b:remote"), 403, ""},
		{"POST", "/api/v1/matrix/antispam/user_may_join_room", `{"user":"@c:hs","room":"!x:hs","is_invited":false}`, 403, ""},
		{"POST", "/api/v1/matrix/antispam/user_may_join_room", `{"user_id":"@c:hs","room_id":"!y:hs","is_invited":false}`, 200, ""},
		{"POST", "/api/v1/matrix/antispam/user_may_join_room", `{"user":"@c:hs"}`, 400, ""},
		{"POST", "/api/v1/matrix/antispam/user_may_invite", `{"inviter":"@a:hs","invitee":"@b:hs","room_id":"!x:hs"}`, 200, ""},
		{"GET", "/api/v1/openapi.json", "", 200, ""},
		{"GET", "/healthz", "", 200, ""},
		{"GET", "/readyz", "", 200, ""},
		{"GET", "/metrics", "", 200, ""},
	} {
		v.check(tm.url, c)
	}

	// A broken version of the policies file: the answer carries last_error.
	os.WriteFile(policies, []byte(brokenPolicies), 0o644)
	wait.For(t, 10*time.Second, func() error {
		if got := tm.metric("chatpulse_policies_reload_errors_total"); got != 1 {
			return fmt.Errorf("%v reload errors, want 1: the broken policies refused", got)
		}
		return nil
	})
	v.check(tm.url, apiCase{"GET", "/api/v1/throttle/policies", "", 200, ""})

	// Before the replay has caught up: /readyz answers 503.
	v.check(startNotConsuming(t), apiCase{"GET", "/readyz", "", 503, ""})

	v.checkCoverage(doc, map[string]string{
		"GET /api/v1/group 200": "group mode only",
		"GET /api/v1/act 200":   "with --act only: TestActEndToEnd checks it",
	})
}

// synapseMessage and synapseJoin are check_event_for_spam's bodies for a
// message of @spam:hs and a join of user in !x:hs, now.
func synapseMessage(id string) string {
	return fmt.Sprintf(`{"event":{"content":{"body":"buy","msgtype":"m.text"},"event_id":%q,"origin_server_ts":%d,"room_id":"!x:hs","sender":"@spam:hs","type":"m.room.message","unsigned":{}}}`,
		id, time.Now().UnixMilli())
}

func synapseJoin(id, user string) string {
	return fmt.Sprintf(`{"event":{"content":{"membership":"join"},"event_id":%q,"origin_server_ts":%d,"room_id":"!x:hs","sender":%q,"state_key":%q,"type":"m.room.member","unsigned":{}}}`,
		id, time.Now().UnixMilli(), user, user)
}

// loadOpenAPI fetches the document and checks that it is valid OpenAPI 3.1.
func loadOpenAPI(t *testing.T, url string) *openapi3.T {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatalf("load the document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI: %v", err)
	}
	return doc
}

// An apiCase is one request and the status chatpulse must answer. A bad
// request that the document cannot refuse says why not.
type apiCase struct {
	method, path, body string
	status             int
	docAllows          string
}

// apiValidator checks answers against the OpenAPI document, and notes
// which documented answers it saw ("GET /api/v1/rooms/{room} 400").
type apiValidator struct {
	t      *testing.T
	router routers.Router
	seen   map[string]bool
}

func (v *apiValidator) check(base string, c apiCase) {
	t := v.t
	t.Helper()
	name := c.method + " " + c.path
	newRequest := func() *http.Request {
		req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.method == "POST" || c.method == "PUT" {
			req.Header.Set("Content-Type", "application/json")
		}
		return req
	}

	req := newRequest()
	// The router matches the decoded path, where the room a%2Fb would be
	// two segments: match the escaped one, and unescape each parameter.
	escaped := req.Clone(context.Background())
	escaped.URL.Path = req.URL.EscapedPath()
	route, params, err := v.router.FindRoute(escaped)
	if err != nil {
		t.Errorf("%s: not in the document: %v", name, err)
		return
	}
	for k, p := range params {
		if params[k], err = url.PathUnescape(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			MultiError: true,
			// The document makes the bearer token optional; the empty
			// requirement must let these requests through without it.
			AuthenticationFunc: func(context.Context, *openapi3filter.AuthenticationInput) error {
				return errors.New("no token in this test")
			},
		},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)

	resp, err := http.DefaultClient.Do(newRequest())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != c.status {
		t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, c.status, body)
		return
	}
	if reqErr != nil && resp.StatusCode != http.StatusBadRequest {
		t.Errorf("%s: the document refuses the request, chatpulse answered %d: %v", name, resp.StatusCode, reqErr)
	}
	if c.status == http.StatusBadRequest && reqErr == nil && c.docAllows == "" {
		t.Errorf("%s: chatpulse refuses the request, the document allows it: %s", name, body)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: the answer does not match the document: %v\n%s", name, err, body)
		return
	}
	v.seen[fmt.Sprintf("%s %s %d", route.Method, route.Path, resp.StatusCode)] = true
}

// The operations of the document match the routes of web.Server one to
// one, as the handler registrations in web/http.go write them: an
// endpoint added to the server without the document fails here.
func TestOpenAPICoversRoutes(t *testing.T) {
	src, err := os.ReadFile("../../web/http.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromFile("../../web/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	// Not JSON endpoints: the websocket, the dashboard, the 404 of unknown
	// /api/ paths.
	undocumented := []string{"GET /ws", "GET /", "GET /api/", "/", "/api/"}
	// Patterns are written as string literals or as route constants.
	consts := map[string]string{}
	for _, m := range regexp.MustCompile(`(route\w+)\s*=\s*"([^"]+)"`).FindAllStringSubmatch(string(src), -1) {
		consts[m[1]] = m[2]
	}
	var served []string
	for _, m := range regexp.MustCompile(`s\.(?:mux|api)\.Handle(?:Func)?\((?:"([^"]+)"|(route\w+))`).FindAllStringSubmatch(string(src), -1) {
		pattern := m[1]
		if pattern == "" {
			pattern = consts[m[2]]
		}
		if !slices.Contains(undocumented, pattern) {
			served = append(served, pattern)
		}
	}
	if len(served) < 10 {
		t.Fatalf("found only %d routes in web/http.go: %q", len(served), served)
	}
	for _, p := range served {
		if !slices.Contains(documented, p) {
			t.Errorf("%s is served and not in web/openapi.json", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(served, p) && p != "GET /api/v1/group" {
			t.Errorf("%s is in web/openapi.json and not served", p)
		}
	}
}

// checkCoverage fails for every answer the document lists and the
// validator never saw, except the 401s (only with --auth-token, which this
// build does not have) and those in notSeeable, with the reason.
func (v *apiValidator) checkCoverage(doc *openapi3.T, notSeeable map[string]string) {
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				key := fmt.Sprintf("%s %s %s", method, path, status)
				if !v.seen[key] && status != "401" && notSeeable[key] == "" {
					v.t.Errorf("%s: documented, never answered in this test", key)
				}
			}
		}
	}
}

// In group mode the answers carry complete and missing_partitions, and
// /api/v1/group answers 200: they match the document too.
func TestOpenAPIGroup(t *testing.T) {
	url := natstest.Start(t).URL()
	ms := startGroup(t, url, "g", 2, nil)
	tm := ms[1]
	publishGroup(t, url, []chat.Event{{Room: "lobby", User: "alice", TS: time.Now().UnixMilli()}})
	doc := loadOpenAPI(t, tm.url+"/api/v1/openapi.json")
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	v := &apiValidator{t: t, router: router, seen: map[string]bool{}}
	for _, c := range []apiCase{
		{"GET", "/api/v1/group", "", 200, ""},
		{"GET", "/api/v1/overview", "", 200, ""},
		{"GET", "/api/v1/rooms", "", 200, ""},
		{"GET", "/api/v1/rooms/lobby", "", 200, ""},
		{"GET", "/api/v1/users/alice", "", 200, ""},
		{"POST", "/api/v1/throttle/check", `{"room":"lobby","user":"alice"}`, 200, ""},
		{"GET", "/api/v1/throttle/active", "", 200, ""},
		{"GET", "/api/v1/throttle/policies", "", 200, ""},
	} {
		v.check(tm.url, c)
	}
}
