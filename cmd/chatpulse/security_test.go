package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go/micro"
)

// A throttle check follows the rules of an event's payload, over HTTP and
// over NATS alike: what the events would refuse, a check refuses with 400,
// instead of answering for another room (encoding/json turns "\ud800" and
// invalid UTF-8 into U+FFFD) or reading "ROOM" as room.
func TestHostileCheckBodies(t *testing.T) {
	tm := startMain(t)
	hostile := []string{
		`{"room":"\ud800","user":"alice"}`,
		`{"room":"lobby","user":"\udfff"}`,
		`{"room":"\ud83d\u0041","user":"alice"}`,
		"{\"room\":\"lob\xffby\",\"user\":\"alice\"}",
		"{\"room\":\"lobby\",\"user\":\"\xed\xa0\x80\"}",
		`{"ROOM":"lobby","user":"alice"}`,
		`{"room":"lobby","user":"alice","user":"bob"}`,
		`{"room":"lobby","room":"lobby","user":"alice"}`,
		`{"room":"lobby\u0000","user":"alice"}`,
	}
	// An event ignores fields it does not know; a check refuses them.
	checkOnly := []string{`{"Room":"lobby","room":"lobby","user":"alice"}`, `{"room":"lobby","user":"alice","txt":"hi"}`}
	for _, body := range append(checkOnly, hostile...) {
		var e map[string]any
		if status := tm.post("/api/v1/throttle/check", body, &e); status != http.StatusBadRequest || len(e) != 1 || e["error"] == "" {
			t.Errorf("HTTP %q: %d %v, want 400 and only an error", body, status, e)
		}
		resp, err := tm.nc.Request("chatpulse.throttle.check", []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Header.Get(micro.ErrorCodeHeader); code != "400" {
			t.Errorf("NATS %q: error code %q, answer %s", body, code, resp.Data)
		}
	}
	// The same payloads as events are refused too, as invalid.
	for _, body := range hostile {
		tm.publish("chat.x.y", body)
	}
	tm.waitReceived(len(hostile))
	if got := tm.metric(`chatpulse_events_rejected_total{reason="invalid"}`); got != float64(len(hostile)) {
		t.Fatalf("as events: %v invalid, want %d", got, len(hostile))
	}
}

// Every answer under /api/ is JSON: a method the path does not take gets
// 405 with Allow, a path with no route 404.
func TestAPIMethodNotAllowed(t *testing.T) {
	tm := startMain(t, "--jetstream=false")
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodPost, "/api/v1/windows", http.StatusMethodNotAllowed, "GET"},
		{http.MethodDelete, "/api/v1/rooms/lobby", http.StatusMethodNotAllowed, "GET"},
		{http.MethodGet, "/api/v1/throttle/check", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPut, "/api/v1/throttle/check", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPost, "/api/v1/nope", http.StatusNotFound, ""},
		{http.MethodGet, "/api/v2/windows", http.StatusNotFound, ""},
	} {
		resp := tm.do(tc.method, tc.path, "")
		var e struct{ Error string }
		err := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || err != nil || e.Error == "" || resp.Header.Get("Allow") != tc.allow ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q (%v), Allow %q, want %d with Allow %q", tc.method, tc.path, resp.StatusCode, e.Error, err, resp.Header.Get("Allow"), tc.status, tc.allow)
		}
	}
}

// A request whose Host is a name chatpulse does not know (DNS rebinding:
// a foreign name made to resolve to 127.0.0.1, so that Origin and Host
// agree) is refused with 403 on the API, the websocket, the metrics and the
// page; health checks answer whatever the Host. IP addresses, localhost
// and --allowed-hosts are served.
func TestHostCheck(t *testing.T) {
	tm := startMain(t, "--jetstream=false", "--allowed-hosts", "chat.example.com, Proxy.Example.")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(tm.url, "http://"))
	status := func(host, path string) int {
		req, _ := http.NewRequest(http.MethodGet, tm.url+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusForbidden && !strings.Contains(string(body), "--allowed-hosts") {
			t.Errorf("Host %s: 403 %s", host, body)
		}
		return resp.StatusCode
	}
	foreign := "rebind.attacker.example:" + port
	for _, path := range []string{"/api/v1/windows", "/api/v1/overview", "/metrics", "/"} {
		if got := status(foreign, path); got != http.StatusForbidden {
			t.Errorf("GET %s with Host %s: %d, want 403", path, foreign, got)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if got := status(foreign, path); got != http.StatusOK {
			t.Errorf("GET %s with Host %s: %d, want 200", path, foreign, got)
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "10.1.2.3", "chat.example.com:" + port, "proxy.example.com", "proxy.example"} {
		want := http.StatusOK
		if host == "proxy.example.com" {
			want = http.StatusForbidden
		}
		if got := status(host, "/api/v1/windows"); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	// The websocket: the page of the rebinding site sends its own name as
	// Origin and as Host.
	h := http.Header{"Origin": {"http://" + foreign}, "Host": {foreign}}
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(tm.url, "http")+"/ws", h)
	if err == nil {
		c.Close()
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("websocket with Host and Origin %s: %v %v, want 403", foreign, resp, err)
	}
	if got := tm.metric("chatpulse_http_host_refused_total"); got != 6 {
		t.Errorf("chatpulse_http_host_refused_total = %v, want 6", got)
	}
}

// With a token, the API, the websocket and the metrics need it; health
// checks and the page's files do not. A refusal says why and nothing else,
// and is counted.
func TestAuthToken(t *testing.T) {
	const token = "s3cret-token_with.all/kinds+of~chars="
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte(token+"\n"), 0o600)
	tm := startMain(t, "--jetstream=false", "--auth-token-file", file)
	if tm.Config.AuthToken != token {
		t.Fatalf("token read from the file: %q", tm.Config.AuthToken)
	}
	tm.publish("chat.lobby.alice", `{"room":"lobby","user":"alice"}`)
	tm.waitReceived(1)

	request := func(method, path, authorization string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, tm.url+path, strings.NewReader(`{"room":"lobby","user":"alice"}`))
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}
	for _, path := range []string{"/api/v1/windows", "/api/v1/overview", "/api/v1/rooms/lobby", "/api/v1/users/alice", "/api/v1/throttle/active", "/api/v1/throttle/policies", "/api/v1/nope", "/metrics"} {
		for _, authorization := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Bearer", "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+token)), token} {
			status, header, body := request(http.MethodGet, path, authorization)
			var e map[string]string
			if status != http.StatusUnauthorized || json.Unmarshal([]byte(body), &e) != nil || len(e) != 1 || e["error"] == "" ||
				!strings.HasPrefix(header.Get("WWW-Authenticate"), "Bearer") || strings.Contains(body, "lobby") {
				t.Errorf("GET %s with %q: %d %s %v", path, authorization, status, body, header)
			}
		}
		if status, _, body := request(http.MethodGet, path, "bearer "+token); status == http.StatusUnauthorized {
			t.Errorf("GET %s with the token: %d %s", path, status, body)
		}
	}
	if status, _, _ := request(http.MethodPost, "/api/v1/throttle/check", ""); status != http.StatusUnauthorized {
		t.Errorf("check without the token: %d", status)
	}
	if status, _, body := request(http.MethodPost, "/api/v1/throttle/check", "Bearer "+token); status != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
		t.Errorf("check with the token: %d %s", status, body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/", "/app.js", "/auth.js"} {
		if status, _, _ := request(http.MethodGet, path, ""); status != http.StatusOK {
			t.Errorf("GET %s without the token: %d, want 200", path, status)
		}
	}

	// The websocket: a client that can set headers sends Authorization; the
	// page offers the token as a subprotocol. Without it: 401, or for the
	// page a close frame that says why.
	wsURL := "ws" + strings.TrimPrefix(tm.url, "http") + "/ws"
	dial := func(h http.Header) (*websocket.Conn, *http.Response, error) {
		h.Set("Origin", tm.url)
		return websocket.DefaultDialer.Dial(wsURL, h)
	}
	subscribeOverview := func(c *websocket.Conn) {
		t.Helper()
		defer c.Close()
		c.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","view":"overview","window":"1m"}`))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := c.ReadMessage()
		if err != nil || !strings.Contains(string(data), `"top_talker":{"user":"alice"`) {
			t.Errorf("overview over the websocket: %s %v", data, err)
		}
	}
	tokenProtocol := "chatpulse.bearer." + base64.RawURLEncoding.EncodeToString([]byte(token))
	if c, _, err := dial(http.Header{"Authorization": {"Bearer " + token}}); err != nil {
		t.Errorf("websocket with Authorization: %v", err)
	} else {
		subscribeOverview(c)
	}
	if c, resp, err := dial(http.Header{"Sec-Websocket-Protocol": {"chatpulse, " + tokenProtocol}}); err != nil {
		t.Errorf("websocket with the token as a subprotocol: %v", err)
	} else {
		if p := resp.Header.Get("Sec-Websocket-Protocol"); p != "chatpulse" {
			t.Errorf("subprotocol picked: %q", p)
		}
		subscribeOverview(c)
	}
	for _, h := range []http.Header{{}, {"Authorization": {"Bearer nope"}}} {
		_, resp, err := dial(h)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("websocket with %v: %v %v, want 401", h, resp, err)
		}
	}
	for protocols, reason := range map[string]string{
		"chatpulse": "this chatpulse needs a token: Authorization: Bearer <token>",
		"chatpulse, chatpulse.bearer." + base64.RawURLEncoding.EncodeToString([]byte("nope")): "wrong token",
		"chatpulse, chatpulse.bearer.!!": "wrong token",
	} {
		c, _, err := dial(http.Header{"Sec-Websocket-Protocol": {protocols}})
		if err != nil {
			t.Errorf("websocket offering %s: %v", protocols, err)
			continue
		}
		c.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","view":"overview","window":"1m"}`))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := c.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != 4401 || ce.Text != reason || data != nil {
			t.Errorf("websocket offering %s: %q %v, want a close 4401 %q and no data", protocols, data, err, reason)
		}
		c.Close()
	}

	tm.token = token
	missing, wrong := tm.metric(`chatpulse_auth_failures_total{reason="missing"}`), tm.metric(`chatpulse_auth_failures_total{reason="wrong"}`)
	if missing != 8+1+2 || wrong != 8*5+1+2 {
		t.Errorf("auth failures: missing %v, wrong %v", missing, wrong)
	}
	if tm.metric("chatpulse_ws_clients") < 0 {
		t.Error("metrics with the token")
	}
}

// --metrics-auth=false leaves /metrics open when the API needs a token.
func TestMetricsWithoutAuth(t *testing.T) {
	tm := startMain(t, "--jetstream=false", "--auth-token", "t0ken", "--metrics-auth=false")
	tm.token = ""
	if got := tm.metric("chatpulse_events_received_total"); got != 0 {
		t.Fatalf("open metrics: %v", got)
	}
	if status := tm.get("/api/v1/windows", nil); status != http.StatusUnauthorized {
		t.Fatalf("the API without the token: %d", status)
	}
}

// Connections cannot be held forever: a client that sends its headers or
// its body a byte at a time is cut off, and so is an idle keep-alive
// connection. (The timeouts are shortened here; the waits are bounds on
// delivery, many times the timeouts.) A websocket is not cut off by them.
func TestHTTPTimeouts(t *testing.T) {
	tm := startMainWith(t, func(m *Main) {
		m.httpTimeouts = httpTimeouts{readHeader: 300 * time.Millisecond, read: 600 * time.Millisecond, write: time.Second, idle: 300 * time.Millisecond}
	}, "--jetstream=false")
	addr := strings.TrimPrefix(tm.url, "http://")
	const cutOff = 5 * time.Second

	// closedWithin dials, sends head, then trickles a byte every 50ms
	// until the server closes the connection; it fails after cutOff.
	closedWithin := func(what, head string) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write([]byte(head))
		closed := make(chan struct{})
		go func() {
			io.Copy(io.Discard, conn) // until the server closes
			close(closed)
		}()
		deadline := time.After(cutOff)
		for tick := time.NewTicker(50 * time.Millisecond); ; {
			select {
			case <-closed:
				return
			case <-deadline:
				t.Errorf("%s: still connected after %v", what, cutOff)
				return
			case <-tick.C:
				conn.Write([]byte("x"))
			}
		}
	}
	closedWithin("slow headers", "GET /api/v1/windows HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
	closedWithin("slow body", "POST /api/v1/throttle/check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n{\"room\":\"")

	// An idle keep-alive connection, after an answered request.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET /api/v1/windows HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	conn.SetReadDeadline(time.Now().Add(cutOff))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("idle keep-alive connection: %v, want closed by the server", err)
	}

	// A websocket outlives every timeout.
	c := tm.mustDial().reading(t)
	send(t, c, `{"type":"subscribe","view":"overview","window":"1m"}`)
	if f, ok := next(t, c, cutOff); !ok || f.Type != "view" {
		t.Fatalf("first view: %+v", f)
	}
	// The idle time is what is tested: nothing says that the server's
	// timeouts have passed for a hijacked connection, so the websocket
	// stays idle past the longest of them (write, 1 s).
	time.Sleep(1500 * time.Millisecond)
	send(t, c, `{"type":"subscribe","view":"overview","window":"5m"}`)
	if f, ok := next(t, c, cutOff); !ok || f.Type != "view" || f.Window != "5m" {
		t.Fatalf("view after the timeouts: %+v", f)
	}
}

// --tls-cert and --tls-key serve HTTPS and wss: with a certificate made
// here; plain HTTP to that port gets nothing of the API.
func TestTLS(t *testing.T) {
	cert, key := selfSigned(t)
	tm := startMain(t, "--jetstream=false", "--tls-cert", cert, "--tls-key", key, "--auth-token", "t0ken")
	if !strings.HasPrefix(tm.url, "https://") {
		t.Fatalf("URL %s", tm.url)
	}
	tm.publish("chat.lobby.alice", `{"room":"lobby","user":"alice"}`)
	tm.waitReceived(1)
	var windows struct{ Windows []any }
	if status := tm.get("/api/v1/windows", &windows); status != http.StatusOK || len(windows.Windows) != 3 {
		t.Fatalf("over HTTPS: %d %v", status, windows)
	}
	resp, err := http.Get("http://" + strings.TrimPrefix(tm.url, "https://") + "/api/v1/windows")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), "windows") {
			t.Fatalf("plain HTTP to the HTTPS port: %d %s", resp.StatusCode, body)
		}
	}
	dialer := websocket.Dialer{TLSClientConfig: tm.client.Transport.(*http.Transport).TLSClientConfig}
	c, _, err := dialer.Dial("wss://"+strings.TrimPrefix(tm.url, "https://")+"/ws", http.Header{"Authorization": {"Bearer t0ken"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","view":"room","room":"lobby","window":"1m"}`))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, data, err := c.ReadMessage(); err != nil || !strings.Contains(string(data), `"messages":1`) {
		t.Fatalf("over wss: %s %v", data, err)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and localhost
// and its key, PEM, and returns their paths.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "chatpulse test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},

		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile
}

// tlsClient is an HTTP client that trusts the certificate in certFile.
func tlsClient(t *testing.T, certFile string) *http.Client {
	t.Helper()
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s: no certificate", certFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}
