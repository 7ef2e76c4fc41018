package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/internal/wait"
)

// testMain is a chatpulse started the way users start it, on random ports
// and a temporary data directory unless args say otherwise.
type testMain struct {
	*Main
	t   *testing.T
	nc  *nats.Conn // a client connection, as a chat server would have
	url string     // HTTP base URL

	client  *http.Client // nil: http.DefaultClient; with --tls-cert one that trusts it
	token   string       // sent as a bearer token, if set
	grouped bool         // a group member: its views say whether they are complete
	log     *syncBuffer  // what it logged (in the test process: warnings and errors)
}

// startMain parses args (after defaults that pick free ports and a temp
// data dir), runs chatpulse and waits until it is ready.
func startMain(t *testing.T, args ...string) *testMain {
	t.Helper()
	return startMainAt(t, nil, args...)
}

// startMainAt is startMain with chatpulse's wall clock set to now.
func startMainAt(t *testing.T, now func() time.Time, args ...string) *testMain {
	t.Helper()
	return startMainWith(t, func(m *Main) {
		if now != nil {
			m.Now = now
		}
	}, args...)
}

// startMainWith is startMain with setup applied to the Main before it runs.
func startMainWith(t *testing.T, setup func(*Main), args ...string) *testMain {
	t.Helper()
	m := NewMain()
	setup(m)
	log := &syncBuffer{t: t}
	m.Log = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	defaults := []string{"--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", t.TempDir()}
	if err := m.ParseFlags(append(defaults, args...), func(string) string { return "" }); err != nil {
		t.Fatalf("flags: %v", err)
	}
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatalf("run: %v", err)
	}
	tm := &testMain{Main: m, t: t, url: m.HTTPURL(), token: m.Config.AuthToken, grouped: m.Config.Group != "", log: log}
	t.Cleanup(func() { tm.Close() })
	if m.Config.TLSCert != "" {
		tm.client = tlsClient(t, m.Config.TLSCert)
	}
	url := m.PublishURL()
	if m.Config.NATSURL != "" {
		url = m.Config.NATSURL // PublishURL hides the credentials
	}
	var opts []nats.Option
	if m.Config.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(m.Config.NATSCreds))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	tm.nc = nc
	tm.waitReady()
	return tm
}

// waitReady polls /readyz until it answers 200.
func (tm *testMain) waitReady() {
	tm.t.Helper()
	wait.For(tm.t, 30*time.Second, func() error {
		resp, err := tm.httpClient().Get(tm.url + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /readyz: %s", resp.Status)
		}
		return nil
	})
}

// do sends a request to chatpulse, with the token if there is one.
func (tm *testMain) do(method, path, body string) *http.Response {
	tm.t.Helper()
	req, err := http.NewRequest(method, tm.url+path, strings.NewReader(body))
	if err != nil {
		tm.t.Fatal(err)
	}
	if tm.token != "" {
		req.Header.Set("Authorization", "Bearer "+tm.token)
	}
	resp, err := tm.httpClient().Do(req)
	if err != nil {
		tm.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

func (tm *testMain) httpClient() *http.Client {
	if tm.client == nil {
		return http.DefaultClient
	}
	return tm.client
}

// get fetches path and decodes its JSON into v, returning the status.
func (tm *testMain) get(path string, v any) int {
	tm.t.Helper()
	resp := tm.do(http.MethodGet, path, "")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			tm.t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return resp.StatusCode
}

// post sends JSON and decodes the answer.
func (tm *testMain) post(path, body string, v any) int {
	tm.t.Helper()
	resp := tm.do(http.MethodPost, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			tm.t.Fatalf("POST %s: %v in %s", path, err, b)
		}
	}
	return resp.StatusCode
}

// publish sends one event payload on subject and flushes.
func (tm *testMain) publish(subject, payload string) {
	tm.t.Helper()
	if err := tm.nc.Publish(subject, []byte(payload)); err != nil {
		tm.t.Fatal(err)
	}
}

// metric reads one sample from /metrics, e.g.
// `chatpulse_events_rejected_total{reason="late"}`; absent is -1.
func (tm *testMain) metric(series string) float64 {
	tm.t.Helper()
	resp := tm.do(http.MethodGet, "/metrics", "")
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tm.t.Fatalf("metric %s: %q", series, v)
			}
			return f
		}
	}
	return -1
}

// waitReceived waits until chatpulse has taken in n messages in all.
func (tm *testMain) waitReceived(n int) {
	tm.t.Helper()
	wait.For(tm.t, 30*time.Second, func() error {
		if got := tm.metric("chatpulse_events_received_total"); got < float64(n) {
			return fmt.Errorf("%v of %d messages received", got, n)
		}
		return nil
	})
}

// published waits until everything chatpulse (in the test process) has
// published on NATS so far has reached nc: chatpulse publishes a marker
// on its own connection now, and a server passes one connection's
// messages on in order, so once nc has the marker it has every alert
// chatpulse published before it. A test that asserts that chatpulse sent
// nothing (no second alert) waits for this first, once the messages that
// could have made it send something are received (waitReceived: a
// message's alerts are published before it counts as received).
func (tm *testMain) published(nc *nats.Conn) {
	tm.t.Helper()
	marker := nats.NewInbox()
	sub, err := nc.SubscribeSync(marker)
	if err != nil {
		tm.t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil { // the server has the subscription
		tm.t.Fatal(err)
	}
	if err := tm.bus.Publish(marker, nil); err != nil {
		tm.t.Fatal(err)
	}
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		tm.t.Fatalf("chatpulse's marker on NATS: %v", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// syncBuffer is a log both the test and a subprocess's stderr copier use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	t  *testing.T
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Log(string(bytes.TrimRight(p, "\n")))
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// buildBinary builds chatpulse once for the tests that run it as users do.
func buildBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chatpulse-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "chatpulse")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}
