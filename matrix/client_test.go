package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is a homeserver of the Matrix shape whose every answer a test
// writes: for fault injection, and to see the requests as they arrive.
type fake struct {
	*httptest.Server
	mu       sync.Mutex
	handler  http.HandlerFunc
	requests []seen
}

// seen is a request as the fake got it.
type seen struct {
	method, uri, auth, contentType, body string
}

func newFake(t *testing.T) *fake {
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, seen{r.Method, r.RequestURI, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), string(body)})
		h := f.handler
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) answer(h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handler = h
}

func (f *fake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fake) last() seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return seen{}
	}
	return f.requests[len(f.requests)-1]
}

// reply answers with status, header and body.
func reply(status int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// raw answers with the bytes of an HTTP response as they are, then
// hangs up; reset hangs up at once with a TCP reset.
func raw(response string, reset bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		if reset {
			conn.(*net.TCPConn).SetLinger(0) // close sends RST, not FIN
		}
		io.WriteString(conn, response)
		conn.Close()
	}
}

const secret = "syt_Ym90_sEcReTtOkEnThAtMuStNeVeRlEaK_0x2a"

func newTestClient(t *testing.T, url string) *Client {
	t.Helper()
	c, err := NewClient(url, func() string { return secret }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRequests: each method sends the request of the spec, ids escaped
// as path segments, the token as a bearer, and reads what it answers.
func TestRequests(t *testing.T) {
	f := newFake(t)
	c := newTestClient(t, f.URL+"/base/")
	ctx := context.Background()
	// Ids with what must be escaped: an old room's event id has '/' and
	// '+', and nothing may end a segment or begin a query early.
	room, event := "!r/o+o m?#%;=,:example.org", "$ab/c+d=:example.org"
	const roomSeg, eventSeg = "!r%2Fo%2Bo%20m%3F%23%25%3B%3D%2C:example.org", "$ab%2Fc%2Bd%3D:example.org"
	const v3 = "/base/_matrix/client/v3"
	for _, tc := range []struct {
		name   string
		answer string
		call   func() (any, error)
		want   any
		seen   seen
	}{
		{"whoami", `{"user_id":"@bot:example.org","device_id":"D"}`,
			func() (any, error) { return c.WhoAmI(ctx) }, "@bot:example.org",
			seen{method: "GET", uri: v3 + "/account/whoami"}},
		{"power levels", plBody,
			func() (any, error) {
				pl, err := c.PowerLevels(ctx, room)
				if err != nil {
					return nil, err
				}
				return pl.UserLevel("@mod:localhost"), nil
			}, 60,
			seen{method: "GET", uri: v3 + "/rooms/" + roomSeg + "/state/m.room.power_levels/"}},
		{"set power levels", `{"event_id":"$pl"}`,
			func() (any, error) {
				pl := mustParse(t, plBody)
				pl.SetUser("@alice:localhost", -1)
				return c.SetPowerLevels(ctx, room, pl)
			}, "$pl",
			seen{method: "PUT", uri: v3 + "/rooms/" + roomSeg + "/state/m.room.power_levels/", contentType: "application/json",
				body: strings.Replace(plBody, `"+5"}`, `"+5","@alice:localhost":-1}`, 1)}},
		{"join rules", `{"join_rule":"restricted","allow":[{"type":"m.room_membership","room_id":"!s:x"}]}`,
			func() (any, error) {
				b, err := c.JoinRules(ctx, room)
				return string(b), err
			}, `{"join_rule":"restricted","allow":[{"type":"m.room_membership","room_id":"!s:x"}]}`,
			seen{method: "GET", uri: v3 + "/rooms/" + roomSeg + "/state/m.room.join_rules/"}},
		{"set join rules", `{"event_id":"$jr"}`,
			func() (any, error) { return c.SetJoinRules(ctx, room, json.RawMessage(`{"join_rule":"invite"}`)) }, "$jr",
			seen{method: "PUT", uri: v3 + "/rooms/" + roomSeg + "/state/m.room.join_rules/", contentType: "application/json",
				body: `{"join_rule":"invite"}`}},
		{"redact", `{"event_id":"$red"}`,
			func() (any, error) { return c.Redact(ctx, room, event, "user_room_flood", "act 1/2") }, "$red",
			seen{method: "PUT", uri: v3 + "/rooms/" + roomSeg + "/redact/" + eventSeg + "/act%201%2F2", contentType: "application/json",
				body: `{"reason":"user_room_flood"}`}},
		{"redact without a reason", `{"event_id":"$red"}`,
			func() (any, error) { return c.Redact(ctx, room, event, "", "t") }, "$red",
			seen{method: "PUT", uri: v3 + "/rooms/" + roomSeg + "/redact/" + eventSeg + "/t", contentType: "application/json", body: `{}`}},
	} {
		f.answer(reply(200, tc.answer))
		got, err := tc.call()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		tc.seen.auth = "Bearer " + secret
		if s := f.last(); s != tc.seen {
			t.Errorf("%s: the homeserver got\n%+v\nwant\n%+v", tc.name, s, tc.seen)
		}
	}
}

// TestAnswersRefused: a 2xx that is not what the endpoint returns is an
// *Error with that status, not temporary.
func TestAnswersRefused(t *testing.T) {
	f := newFake(t)
	c := newTestClient(t, f.URL)
	ctx := context.Background()
	for _, a := range []struct{ name, body string }{
		{"not JSON", `<html>hello</html>`},
		{"too large", `{"event_id":"$e","padding":"` + strings.Repeat("x", MaxBody) + `"}`},
		{"no event_id", `{}`},
		{"null", `null`},
		{"an array", `["$e"]`},
	} {
		f.answer(reply(200, a.body))
		_, err := c.Redact(ctx, "!r:x", "$e", "", "t")
		var e *Error
		if !errors.As(err, &e) || e.Status != 200 || Temporary(err) || Forbidden(err) {
			t.Errorf("%s: %v (%#v): want an *Error of status 200, not temporary", a.name, err, e)
		}
	}
	for _, a := range []struct{ name, body string }{
		{"power levels not an object", `[]`},
		{"power levels with a bad level", `{"users":{"@a:b":"x"}}`},
	} {
		f.answer(reply(200, a.body))
		_, err := c.PowerLevels(ctx, "!r:x")
		if e := (*Error)(nil); !errors.As(err, &e) || e.Status != 200 || Temporary(err) {
			t.Errorf("%s: %v", a.name, err)
		}
	}
	f.answer(reply(200, `"public"`))
	if _, err := c.JoinRules(ctx, "!r:x"); err == nil {
		t.Error("join rules that are not an object accepted")
	}
	f.answer(reply(200, `{"device_id":"D"}`))
	if _, err := c.WhoAmI(ctx); err == nil {
		t.Error("whoami without user_id accepted")
	}
}

// TestFaults: what each failure of a homeserver (or of the way to it)
// is, as the act queue asks: RetryAfter, Forbidden, Temporary.
func TestFaults(t *testing.T) {
	f := newFake(t)
	c := newTestClient(t, f.URL)
	const date = "Mon, 02 Jan 2006 15:04:05 GMT"
	type want struct {
		status      int // 0: not an *Error
		code        string
		retryAfter  time.Duration
		rateLimited bool
		forbidden   bool
		temporary   bool
	}
	for _, fault := range []struct {
		name   string
		answer http.HandlerFunc
		want   want
	}{
		{"429 retry_after_ms", reply(429, `{"errcode":"M_LIMIT_EXCEEDED","error":"Too many requests","retry_after_ms":1500}`),
			want{status: 429, code: "M_LIMIT_EXCEEDED", retryAfter: 1500 * time.Millisecond, rateLimited: true}},
		{"429 Retry-After seconds", reply(429, `{"errcode":"M_LIMIT_EXCEEDED","error":"Too many requests"}`, "Retry-After", "3"),
			want{status: 429, code: "M_LIMIT_EXCEEDED", retryAfter: 3 * time.Second, rateLimited: true}},
		{"429 Retry-After before retry_after_ms", reply(429, `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":500}`, "Retry-After", "2"),
			want{status: 429, code: "M_LIMIT_EXCEEDED", retryAfter: 2 * time.Second, rateLimited: true}},
		{"429 Retry-After date", reply(429, `{"errcode":"M_LIMIT_EXCEEDED"}`, "Retry-After", "Mon, 02 Jan 2006 15:04:12 GMT", "Date", date),
			want{status: 429, code: "M_LIMIT_EXCEEDED", retryAfter: 7 * time.Second, rateLimited: true}},
		{"429 Retry-After unreadable", reply(429, `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":250}`, "Retry-After", "soon"),
			want{status: 429, code: "M_LIMIT_EXCEEDED", retryAfter: 250 * time.Millisecond, rateLimited: true}},
		{"429 unsaid, not JSON", reply(429, `slow down`),
			want{status: 429, rateLimited: true}},
		{"429 retry_after_ms negative", reply(429, `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":-5}`),
			want{status: 429, code: "M_LIMIT_EXCEEDED", rateLimited: true}},
		{"403", reply(403, `{"errcode":"M_FORBIDDEN","error":"You don't have permission to redact this event, power level too low."}`),
			want{status: 403, code: "M_FORBIDDEN", forbidden: true}},
		{"400", reply(400, `{"errcode":"M_NOT_FOUND","error":"unknown event ID"}`),
			want{status: 400, code: "M_NOT_FOUND"}},
		{"500", reply(500, `{"errcode":"M_UNKNOWN","error":"Internal Server Error"}`),
			want{status: 500, code: "M_UNKNOWN", temporary: true}},
		{"502 from a proxy", reply(502, "<html><body><h1>502 Bad Gateway</h1>\n</body></html>"),
			want{status: 502, temporary: true}},
		{"503 Retry-After", reply(503, ``, "Retry-After", "30"),
			want{status: 503, retryAfter: 30 * time.Second, temporary: true}},
		{"502 too large", reply(502, strings.Repeat("x", 2*MaxBody)),
			want{status: 502, temporary: true}},
		{"redirect", reply(301, ``, "Location", "https://matrix.example.org/_matrix/client/v3/account/whoami"),
			want{status: 301}},
		{"connection reset", raw("", true), want{temporary: true}},
		{"connection closed mid-answer", raw("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"user_id\"", false),
			want{temporary: true}},
		{"not HTTP", raw("SSH-2.0-OpenSSH_9.6\r\n", false), want{temporary: true}},
	} {
		f.answer(fault.answer)
		_, err := c.WhoAmI(context.Background())
		if err == nil {
			t.Errorf("%s: no error", fault.name)
			continue
		}
		var e *Error
		isError := errors.As(err, &e)
		got := want{forbidden: Forbidden(err), temporary: Temporary(err)}
		got.retryAfter, got.rateLimited = RetryAfter(err)
		if isError {
			got.status, got.code = e.Status, e.Code
			if !got.rateLimited {
				got.retryAfter = e.RetryAfter
			}
		}
		if got != fault.want {
			t.Errorf("%s: %v\ngot  %+v\nwant %+v", fault.name, err, got, fault.want)
		}
		if msg := err.Error(); len(msg) > 1000 || strings.ContainsAny(msg, "\n\r") || !strings.Contains(msg, "/_matrix/client/v3/account/whoami") {
			t.Errorf("%s: the error does not read as one line naming the request: %q", fault.name, msg)
		}
	}
}

// TestTimeouts: a homeserver that does not answer in time is temporary;
// a request its caller canceled is not.
func TestTimeouts(t *testing.T) {
	f := newFake(t)
	release := make(chan struct{})
	defer close(release)
	f.answer(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	c := newTestClient(t, f.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.WhoAmI(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !Temporary(err) {
		t.Errorf("deadline: %v (temporary %v)", err, Temporary(err))
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, err = c.WhoAmI(ctx)
	if !errors.Is(err, context.Canceled) || Temporary(err) {
		t.Errorf("canceled: %v (temporary %v)", err, Temporary(err))
	}

	// Nobody listening.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	_, err = newTestClient(t, "http://"+addr).WhoAmI(context.Background())
	if e := (*Error)(nil); errors.As(err, &e) || !Temporary(err) {
		t.Errorf("refused: %v (temporary %v)", err, Temporary(err))
	}
	if Temporary(errors.New("anything else")) || Temporary(nil) || Forbidden(nil) {
		t.Error("an error of no request is classified")
	}
}

// TestToken: the token is asked for on every request, trimmed, checked
// before it is sent, and never in an error, whatever the homeserver
// echoes.
func TestToken(t *testing.T) {
	f := newFake(t)
	var token atomic.Value
	token.Store(secret + "\n")
	c, err := NewClient(f.URL, func() string { return token.Load().(string) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f.answer(reply(200, `{"user_id":"@bot:x"}`))
	if _, err := c.WhoAmI(ctx); err != nil || f.last().auth != "Bearer "+secret {
		t.Fatalf("%v; sent %q", err, f.last().auth)
	}
	token.Store("syt_new_token_read_on_sighup")
	if _, err := c.WhoAmI(ctx); err != nil || f.last().auth != "Bearer syt_new_token_read_on_sighup" {
		t.Fatalf("%v; sent %q", err, f.last().auth)
	}

	// An echo of the token, in the body and in a redirect.
	token.Store(secret)
	f.answer(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"errcode":"M_UNKNOWN_TOKEN","error":"Unknown token %s (%s)","soft_logout":false}`, secret, r.Header.Get("Authorization"))
	})
	_, err = c.WhoAmI(ctx)
	if !Unauthorized(err) || Forbidden(err) || Temporary(err) || strings.Contains(err.Error(), secret) {
		t.Errorf("echoed token: %v", err)
	}
	f.answer(reply(500, "<pre>Authorization: Bearer "+secret+"</pre>"))
	if _, err = c.WhoAmI(ctx); strings.Contains(err.Error(), secret) {
		t.Errorf("echoed token: %v", err)
	}
	f.answer(reply(302, ``, "Location", "https://elsewhere.example/?access_token="+secret))
	if _, err = c.WhoAmI(ctx); strings.Contains(err.Error(), secret) {
		t.Errorf("echoed token: %v", err)
	}

	// Tokens that cannot be sent are not.
	before := f.count()
	for _, bad := range []string{"", "  ", "syt_with space", "syt_é", "syt_\x00"} {
		token.Store(bad)
		_, err := c.WhoAmI(ctx)
		if err == nil || (len(bad) > 3 && strings.Contains(err.Error(), bad)) {
			t.Errorf("token %q: %v", bad, err)
		}
	}
	if n := f.count() - before; n != 0 {
		t.Errorf("%d requests sent with tokens that cannot be", n)
	}
}

func TestNewClient(t *testing.T) {
	token := func() string { return secret }
	for _, bad := range []string{
		"", "matrix.example.org", "ftp://matrix.example.org", "http://", "https:matrix.example.org",
		"https://bot:pw@matrix.example.org", "https://matrix.example.org/?x=1", "https://matrix.example.org/#x",
		"https://matrix.example.org/_matrix/client/v3", "http://[::1",
	} {
		if _, err := NewClient(bad, token, nil); err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "pw@") {
			t.Errorf("%q: the error shows the password: %v", bad, err)
		}
	}
	if _, err := NewClient("https://matrix.example.org", nil, nil); err == nil {
		t.Error("no token function accepted")
	}
	for _, good := range []string{"https://matrix.example.org", "http://127.0.0.1:8008/", "https://example.org/matrix/"} {
		if _, err := NewClient(good, token, nil); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	c := newTestClient(t, "https://matrix.example.org")
	for _, call := range []func() error{
		func() error { _, err := c.Redact(context.Background(), "!r:x", "$e", "", ""); return err },
		func() error { _, err := c.Redact(context.Background(), "", "$e", "", "t"); return err },
		func() error { _, err := c.PowerLevels(context.Background(), ""); return err },
		func() error {
			_, err := c.SetJoinRules(context.Background(), "!r:x", json.RawMessage(`"invite"`))
			return err
		},
	} {
		if err := call(); err == nil {
			t.Error("a call with an argument missing made a request")
		}
	}
}
