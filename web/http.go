package web

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
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
}

// Server serves the API, the websocket hub and the dashboard.
type Server struct {
	agg  *aggregator.Aggregator
	thr  *throttle.Set
	opts Options
	mux  *http.ServeMux
	Hub  *Hub
}

// New returns a server over agg and thr. Start the hub with Hub.Run.
func New(agg *aggregator.Aggregator, thr *throttle.Set, opts Options) *Server {
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
	s := &Server{agg: agg, thr: thr, opts: opts, mux: http.NewServeMux()}
	s.Hub = newHub(s)
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /api/v1/windows", s.api(func(r *http.Request) (any, error) { return s.agg.Windows(), nil }))
	s.mux.HandleFunc("GET /api/v1/overview", s.api(func(r *http.Request) (any, error) {
		q := r.URL.Query()
		return s.view(viewKey{kind: viewOverview, window: q.Get("window")}, q.Get("k"))
	}))
	s.mux.HandleFunc("GET /api/v1/rooms", s.api(func(r *http.Request) (any, error) {
		q := r.URL.Query()
		limit, err := intParam("limit", q.Get("limit"), defaultLimit, maxLimit)
		if err != nil {
			return nil, err
		}
		return s.agg.Rooms(q.Get("window"), limit, s.nowMs())
	}))
	s.mux.HandleFunc("GET /api/v1/rooms/{room}", s.api(func(r *http.Request) (any, error) {
		q := r.URL.Query()
		return s.view(viewKey{kind: viewRoom, window: q.Get("window"), room: r.PathValue("room")}, q.Get("k"))
	}))
	s.mux.HandleFunc("GET /api/v1/users/{user}", s.api(func(r *http.Request) (any, error) {
		user := r.PathValue("user")
		if err := chat.CheckName("user", user); err != nil {
			return nil, &badRequest{err.Error()}
		}
		return s.agg.User(user, r.URL.Query().Get("window"), s.nowMs())
	}))
	s.mux.HandleFunc("POST /api/v1/throttle/check", s.api(func(r *http.Request) (any, error) {
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxCheckBody+1))
		if err != nil {
			return nil, badf("request body over %d bytes", maxCheckBody)
		}
		req, err := decodeCheck(body)
		if err != nil {
			return nil, err
		}
		return s.check(req), nil
	}))
	s.mux.HandleFunc("GET /api/v1/throttle/active", s.api(func(r *http.Request) (any, error) {
		return s.active(), nil
	}))
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.opts.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "replaying"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	s.mux.HandleFunc("GET /ws", s.Hub.serveWS)
	s.mux.Handle("GET /", dashboard())
	s.mux.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint: " + r.Method + " " + r.URL.Path + "; see the README for the API"})
	})
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) nowMs() int64 { return s.opts.Now().UnixMilli() }

// view builds an overview or room view, the same for HTTP and websocket.
func (s *Server) view(key viewKey, kParam string) (any, error) {
	k, err := intParam("k", kParam, defaultK, maxK)
	if err != nil {
		return nil, err
	}
	switch key.kind {
	case viewOverview:
		return s.agg.Overview(key.window, k, s.nowMs())
	default:
		if err := chat.CheckName("room", key.room); err != nil {
			return nil, &badRequest{err.Error()}
		}
		return s.agg.Room(key.room, key.window, k, s.nowMs())
	}
}

func (s *Server) check(req checkRequest) throttle.Result {
	text := ""
	if req.Text != nil {
		text = *req.Text
	}
	return s.thr.Check(s.nowMs(), req.Room, req.User, text, req.Text != nil)
}

// activeView is GET /api/v1/throttle/active.
type activeView struct {
	AsOf   chat.Time         `json:"as_of"`
	Active []throttle.Active `json:"active"`
}

func (s *Server) active() activeView {
	now := s.nowMs()
	v := activeView{AsOf: chat.Time(now), Active: s.thr.Active(now)}
	if v.Active == nil {
		v.Active = []throttle.Active{}
	}
	return v
}

// api adapts a handler that returns a value or an error to JSON over HTTP.
func (s *Server) api(h func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r)
		var bad *badRequest
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, v)
		case errors.As(err, &bad), errors.Is(err, aggregator.ErrUnknownWindow):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		default:
			s.opts.Log.Error("api", "path", r.URL.Path, "err", err)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error"})
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
