package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
)

// The websocket subprotocols of chatpulse's page. A browser cannot set an
// Authorization header on a websocket, so the page offers two
// subprotocols: wsProtocol, which the server picks, and wsTokenPrefix
// followed by the token in unpadded base64url, which the server reads and
// never echoes. (A token in the URL would end up in access logs.)
const (
	wsProtocol    = "chatpulse"
	wsTokenPrefix = "chatpulse.bearer."
	// closeUnauthorized is the close code of a websocket refused for its
	// token: 4000-4999 are the application's, and 401 says why.
	closeUnauthorized = 4401
)

// A guard decides, before any handler runs, whether a request may be
// served:
//
//   - Its Host must be one of this server's names (checkHost). A page on
//     another site can make a visitor's browser reach chatpulse under the
//     other site's name (DNS rebinding: the name is made to resolve to
//     127.0.0.1); the browser then sends that name as Host and as Origin,
//     so the origin check alone would take it for the same origin. An IP
//     address or localhost as Host cannot be such a name.
//   - With a token configured, the API and the websocket (and the metrics
//     if so configured) need it (checkToken): 401 and {"error"} without
//     it, or for the page's websocket a close frame saying why. Tokens are
//     compared in constant time, as SHA-256 sums so that not even the
//     length shows.
//
// Refusals are counted: chatpulse_http_host_refused_total and
// chatpulse_auth_failures_total{reason="missing"|"wrong"}.
type guard struct {
	anyHost bool
	hosts   map[string]bool // lower case, without a trailing dot

	hasToken    bool
	tokenSum    [sha256.Size]byte
	checkOrigin func(*http.Request) bool

	hostRefused prometheus.Counter
	authFailed  *prometheus.CounterVec
}

func newGuard(opts Options, checkOrigin func(*http.Request) bool) guard {
	g := guard{
		hosts:       map[string]bool{},
		hasToken:    opts.AuthToken != "",
		tokenSum:    sha256.Sum256([]byte(opts.AuthToken)),
		checkOrigin: checkOrigin,
		hostRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatpulse_http_host_refused_total",
			Help: "HTTP requests refused because their Host is not one of chatpulse's names (see --allowed-hosts).",
		}),
		authFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatpulse_auth_failures_total",
			Help: "HTTP and websocket requests refused for a missing or wrong token.",
		}, []string{"reason"}),
	}
	for _, h := range opts.AllowedHosts {
		if h == "*" {
			g.anyHost = true
		}
		g.hosts[hostName(h)] = true
	}
	for _, reason := range []string{"missing", "wrong"} {
		g.authFailed.WithLabelValues(reason)
	}
	opts.Registerer.MustRegister(g.hostRefused, g.authFailed)
	return g
}

// checkHost lets a request through if its Host is allowed, and otherwise
// answers 403.
func (g *guard) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if g.hostAllowed(r.Host) {
		return true
	}
	g.hostRefused.Inc()
	writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf("Host %q is not one of this server's names (see --allowed-hosts)", r.Host)})
	return false
}

// hostAllowed: an IP address, localhost, a configured name, or none at all
// (HTTP/1.0; no browser sends that).
func (g *guard) hostAllowed(host string) bool {
	name := hostName(host)
	return g.anyHost || name == "" || name == "localhost" || net.ParseIP(name) != nil || g.hosts[name]
}

// hostName is the name of a Host header or an --allowed-hosts entry: no
// port, no brackets, lower case, no trailing dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// checkToken lets a request through if no token is configured or it
// carries the token, and otherwise refuses it.
func (g *guard) checkToken(w http.ResponseWriter, r *http.Request) bool {
	if !g.hasToken {
		return true
	}
	token, ok := bearer(r)
	reason, msg := "missing", "this chatpulse needs a token: Authorization: Bearer <token>"
	if ok {
		sum := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(sum[:], g.tokenSum[:]) == 1 {
			return true
		}
		reason, msg = "wrong", "wrong token"
	}
	g.authFailed.WithLabelValues(reason).Inc()
	if websocket.IsWebSocketUpgrade(r) && slices.Contains(websocket.Subprotocols(r), wsProtocol) {
		g.closeWS(w, r, msg)
		return false
	}
	challenge := `Bearer realm="chatpulse"`
	if reason == "wrong" {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
	return false
}

// bearer is the token a request carries: in Authorization, or on a
// websocket in a subprotocol. ok is false when it carries none.
func bearer(r *http.Request) (token string, ok bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", true // credentials of another kind: wrong, not missing
		}
		return strings.TrimSpace(token), true
	}
	if !websocket.IsWebSocketUpgrade(r) {
		return "", false
	}
	for _, p := range websocket.Subprotocols(r) {
		if enc, found := strings.CutPrefix(p, wsTokenPrefix); found {
			b, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil {
				return "", true
			}
			return string(b), true
		}
	}
	return "", false
}

// closeWS refuses the page's websocket the way a browser can read: it
// completes the handshake (the origin check still applies), then closes
// with closeUnauthorized and the reason, and waits a moment for the
// browser's close in answer. Nothing is sent but the close.
func (g *guard) closeWS(w http.ResponseWriter, r *http.Request, reason string) {
	u := websocket.Upgrader{CheckOrigin: g.checkOrigin, Subprotocols: []string{wsProtocol}}
	conn, err := u.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered
	}
	defer conn.Close()
	deadline := time.Now().Add(time.Second)
	if conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(closeUnauthorized, reason), deadline) != nil {
		return
	}
	conn.SetReadDeadline(deadline)
	conn.ReadMessage()
}
