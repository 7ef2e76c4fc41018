package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/moderation"
	"github.com/chatpulse/chatpulse/throttle"
)

// Options configure a Server.
type Options struct {
	Now            func() time.Time
	Ready          func() bool           // readiness: has ingest caught up?
	Gatherer       prometheus.Gatherer   // what /metrics serves
	Registerer     prometheus.Registerer // where the web metrics go
	Log            *slog.Logger
	PushInterval   time.Duration // websocket pushes
	AllowedOrigins []string      // besides the same origin, for /ws
	// MaxName is the longest room or user name a request may name: that
	// of the events read (docs/contract.md sections 1 and 13); 0:
	// chat.MaxNameLen.
	MaxName int
	// Moderation keeps the moderators' actions; nil: the moderation
	// routes answer 404.
	Moderation Moderator
	// Group answers GET /api/v1/group; nil, or nil from it (standalone),
	// answers 404.
	Group func() any
	// Act answers GET /api/v1/act (docs/contract.md section 14); nil, or
	// nil from it (no --act), is a 404.
	Act func() any
	// Policies answers GET /api/v1/throttle/policies: the throttle policies
	// in force, and since when.
	Policies func() any
	// File files an event Synapse's checks allowed on chatpulse's own
	// chat stream, as if it had arrived on the bus, under its ID
	// (docs/contract.md section 14); nil: nothing is filed.
	File func(ctx context.Context, ev ingest.Event) error

	// AllowedHosts are the names that requests may carry in Host, besides
	// IP addresses and localhost; "*" allows any. See checkHost.
	AllowedHosts []string
	// AuthToken, when set, is the bearer token that the API and the
	// websocket need, and /metrics too when MetricsAuth. See checkToken.
	AuthToken   string
	MetricsAuth bool
}

// Views answers the views of docs/contract.md section 3, at now in Unix
// milliseconds; *aggregator.Aggregator is one. Web never knows where the
// counts live, so another answer (several instances merged, say) can serve
// the same API.
type Views interface {
	Windows() aggregator.Windows
	WindowNames() []string // the default first
	Overview(win string, k int, now int64) (aggregator.Overview, error)
	Rooms(win string, limit int, now int64) (aggregator.Rooms, error)
	Room(name, win string, k int, now int64) (aggregator.Room, error)
	User(name, win string, now int64) (aggregator.User, error)
}

// Throttle answers the throttle check and the active keys of contract
// sections 3, 5 and 10, at now in Unix milliseconds: an engine's, which
// publishes the alerts a consuming check raises.
type Throttle interface {
	Check(now int64, q throttle.Query) throttle.Result
	// Consume is a consuming check (docs/contract.md section 10): decided
	// and, when allowed, counted, with the id its event will carry.
	Consume(now int64, q throttle.Query, id string) throttle.Result
	Active(now int64) []throttle.Active
}

var _ Views = (*aggregator.Aggregator)(nil)

// Server serves the API, the websocket hub and the dashboard. It owns the
// routes and the hub; what it serves it reads from Views and Throttle.
type Server struct {
	views Views
	thr   Throttle
	opts  Options
	mux   *http.ServeMux // every route
	api   *http.ServeMux // the routes under /api/
	hub   *hub
	guard guard
	anti  antispam
}

// New returns a server over views and thr. Start its websocket hub with Run.
func New(views Views, thr Throttle, opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Ready == nil {
		opts.Ready = func() bool { return true }
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.PushInterval <= 0 {
		opts.PushInterval = time.Second
	}
	if opts.MaxName <= 0 {
		opts.MaxName = chat.MaxNameLen
	}
	s := &Server{views: views, thr: thr, opts: opts, mux: http.NewServeMux(), api: http.NewServeMux()}
	s.hub = newHub(hubConfig{
		render:       s.render,
		windows:      views.WindowNames,
		maxName:      opts.MaxName,
		pushInterval: opts.PushInterval,
		checkOrigin:  s.checkOrigin,
	})
	// The page names chatpulse's subprotocol on every websocket (and may
	// carry its token in another): a browser drops a connection whose
	// answer names none of those it offered.
	s.hub.upgrader.Subprotocols = []string{wsProtocol}
	s.guard = newGuard(opts, s.checkOrigin)
	s.anti = newAntispam(opts.Registerer)
	opts.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatpulse_ws_clients", Help: "Websocket clients connected.",
	}, func() float64 { return float64(s.hub.connected()) }))
	opts.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatpulse_ws_views", Help: "Distinct views pushed to websocket clients.",
	}, func() float64 { return float64(s.hub.watchedViews()) }))
	s.routes()
	return s
}

// Run runs the websocket hub until stop is closed: it serves subscriptions,
// pushes views every push interval and fans alerts out. Websocket clients
// wait for it.
func (s *Server) Run(stop <-chan struct{}) { s.hub.run(stop) }

// Alert sends an alert to the dashboards that subscribed to alerts, with
// the next push. It never blocks: if the hub is that far behind, the alert
// is dropped (it is on NATS too) and counted as omitted.
func (s *Server) Alert(a throttle.Alert) { s.hub.alerts.send(a) }

// Acted sends an act on the chat system, or an undo (docs/contract.md
// section 14), to the dashboards that subscribed to acts, with the next
// push. data is its JSON as published on chatpulse.act.<kind> (act.Act);
// the hub keeps it, so the caller must not change it. It never blocks: if
// the hub is that far behind, the act is dropped (it is on NATS too) and
// counted as omitted.
func (s *Server) Acted(data []byte) { s.hub.acts.send(data) }

// Routes the guard tells apart: the health checks need no token and
// answer any Host; the API and the websocket need the token, and metrics
// too if so configured.
const (
	routeHealthz = "GET /healthz"
	routeReadyz  = "GET /readyz"
	routeMetrics = "GET /metrics"
	routeWS      = "GET /ws"
	routeAPI     = "/api/"
)

func (s *Server) routes() {
	s.api.HandleFunc("GET /api/v1/windows", s.json(viewOf(s.windows)))
	s.api.HandleFunc("GET /api/v1/overview", s.json(viewOf(s.overview)))
	s.api.HandleFunc("GET /api/v1/rooms", s.json(viewOf(s.rooms)))
	s.api.HandleFunc("GET /api/v1/rooms/{room}", s.json(viewOf(s.room)))
	s.api.HandleFunc("GET /api/v1/users/{user}", s.json(viewOf(s.user)))
	s.api.HandleFunc("POST /api/v1/throttle/check", s.json(s.throttleCheck))
	s.api.HandleFunc("GET /api/v1/throttle/active", s.json(s.throttleActive))
	s.api.HandleFunc("GET /api/v1/throttle/policies", s.throttlePolicies)
	s.api.HandleFunc("GET /api/v1/group", s.group)
	s.api.HandleFunc("GET /api/v1/act", s.act)
	s.api.HandleFunc("PUT /api/v1/rooms/{room}/slowmode", s.json(s.putSlowmode))
	s.api.HandleFunc("DELETE /api/v1/rooms/{room}/slowmode", s.json(s.lift(moderation.Slowmode)))
	s.api.HandleFunc("PUT /api/v1/users/{user}/timeout", s.json(s.putTimeout))
	s.api.HandleFunc("DELETE /api/v1/users/{user}/timeout", s.json(s.lift(moderation.Timeout)))
	s.api.HandleFunc("GET /api/v1/moderation", s.json(s.listActions))
	s.api.HandleFunc("POST /api/v1/matrix/antispam/check_event_for_spam", s.checkEventForSpam)
	s.api.HandleFunc("POST /api/v1/matrix/antispam/user_may_join_room", s.userMayJoinRoom)
	s.api.HandleFunc("POST /api/v1/matrix/antispam/ping", s.antispamPing)
	s.api.HandleFunc("POST /api/v1/matrix/antispam/{callback}", s.antispamOther)
	s.api.HandleFunc("GET /api/v1/openapi.json", serveOpenAPI)
	s.mux.HandleFunc(routeAPI, s.serveAPI)
	s.mux.Handle(routeMetrics, promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	s.mux.HandleFunc(routeHealthz, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc(routeReadyz, func(w http.ResponseWriter, r *http.Request) {
		if !s.opts.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "replaying"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	s.mux.HandleFunc(routeWS, s.hub.serveWS)
	// Everything else is the dashboard's files. Not "GET /": that would
	// clash with routeAPI, which takes every method.
	files := dashboard()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// ServeHTTP serves a request once it has passed the guard: a Host of
// this server's, and the token where one is needed.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, route := s.mux.Handler(r)
	if route != routeHealthz && route != routeReadyz {
		if !s.guard.checkHost(w, r) {
			return
		}
		if (route == routeAPI || route == routeWS || route == routeMetrics && s.opts.MetricsAuth) && !s.guard.checkToken(w, r) {
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// serveAPI routes a request under /api/, answering in JSON when no route
// takes it: 405 (with Allow) when the path has a route for another method,
// 404 otherwise.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	if _, route := s.api.Handler(r); route != "" {
		s.api.ServeHTTP(w, r)
		return
	}
	var allow []string
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		if _, route := s.api.Handler(&http.Request{Method: method, URL: r.URL, Host: r.Host}); route != "" {
			allow = append(allow, method)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": r.Method + " " + r.URL.Path + ": method not allowed; allowed: " + strings.Join(allow, ", ")})
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint: " + r.Method + " " + r.URL.Path + "; see docs/api.md for the API"})
}

// nowMs reads the clock for a request: web hands time on as Unix
// milliseconds.
func (s *Server) nowMs() int64 { return s.opts.Now().UnixMilli() }

// checkOrigin allows requests without an Origin (not from a browser), from
// the same origin, and from --allowed-origins; anything else gets 403, so no
// other site can open a websocket with a visitor's browser.
func (s *Server) checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, o := range s.opts.AllowedOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	return false
}

// json adapts a handler that returns a value or an error to JSON over HTTP.
func (s *Server) json(h func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r)
		var bad *badRequest
		var missing *notFound
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, v)
		case errors.As(err, &bad), errors.Is(err, aggregator.ErrUnknownWindow):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		case errors.As(err, &missing):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		default:
			s.opts.Log.Error("api", "path", r.URL.Path, "err", err)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer jsonBufs.Put(buf)
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(v); err != nil { // as json.Marshal, and a newline
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"internal error"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// jsonBufs hold answers while they are written, so that an answer costs no
// allocation of its size (a throttle check's is its largest).
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}
