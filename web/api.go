package web

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/throttle"
)

// Parameter limits of docs/contract.md section 3.
const (
	defaultK     = 10
	maxK         = aggregator.MaxK // 100; the aggregator lists no more
	defaultLimit = 50
	maxLimit     = 1000
	maxCheckBody = 64 << 10
)

// The API handlers of docs/contract.md sections 3 and 5. Each parses and checks its
// parameters where they arrive, answers the first bad one with a
// badRequest, and asks Views or Throttle only with valid ones.

// params are a view request's parameters, wherever it came from: an HTTP
// request's path values and query (httpParams), or the fields of a JSON
// request on NATS (fields).
type params interface{ Get(name string) string }

type httpParams struct{ r *http.Request }

func (p httpParams) Get(name string) string {
	if v := p.r.PathValue(name); v != "" {
		return v
	}
	return p.r.URL.Query().Get(name)
}

// viewOf adapts a view to HTTP.
func viewOf(view func(params) (any, error)) func(*http.Request) (any, error) {
	return func(r *http.Request) (any, error) { return view(httpParams{r}) }
}

// windows is GET /api/v1/windows.
func (s *Server) windows(params) (any, error) { return s.views.Windows(), nil }

// overview is GET /api/v1/overview.
func (s *Server) overview(p params) (any, error) {
	k, err := intParam("k", p.Get("k"), defaultK, maxK)
	if err != nil {
		return nil, err
	}
	win, err := s.window(p.Get("window"))
	if err != nil {
		return nil, err
	}
	return s.views.Overview(win, k, s.nowMs())
}

// rooms is GET /api/v1/rooms.
func (s *Server) rooms(p params) (any, error) {
	limit, err := intParam("limit", p.Get("limit"), defaultLimit, maxLimit)
	if err != nil {
		return nil, err
	}
	win, err := s.window(p.Get("window"))
	if err != nil {
		return nil, err
	}
	return s.views.Rooms(win, limit, s.nowMs())
}

// room is GET /api/v1/rooms/{room}.
func (s *Server) room(p params) (any, error) {
	k, err := intParam("k", p.Get("k"), defaultK, maxK)
	if err != nil {
		return nil, err
	}
	room := p.Get("room")
	if err := checkName("room", room, s.opts.MaxName); err != nil {
		return nil, err
	}
	win, err := s.window(p.Get("window"))
	if err != nil {
		return nil, err
	}
	return s.views.Room(room, win, k, s.nowMs())
}

// user is GET /api/v1/users/{user}.
func (s *Server) user(p params) (any, error) {
	user := p.Get("user")
	if err := checkName("user", user, s.opts.MaxName); err != nil {
		return nil, err
	}
	win, err := s.window(p.Get("window"))
	if err != nil {
		return nil, err
	}
	return s.views.User(user, win, s.nowMs())
}

// throttleCheck is POST /api/v1/throttle/check.
func (s *Server) throttleCheck(r *http.Request) (any, error) {
	body := jsonBufs.Get().(*bytes.Buffer) // decodeCheck keeps none of it
	defer jsonBufs.Put(body)
	body.Reset()
	if err := readBodyInto(body, r, maxCheckBody); err != nil {
		return nil, err
	}
	return s.CheckRequest(body.Bytes())
}

// readBody reads a request's body, of at most limit bytes, into a buffer
// of its own.
func readBody(r *http.Request, limit int) ([]byte, error) {
	var body bytes.Buffer
	err := readBodyInto(&body, r, limit)
	return body.Bytes(), err
}

// readBodyInto reads a request's body, of at most limit bytes, into buf;
// the error is a bad request.
func readBodyInto(buf *bytes.Buffer, r *http.Request, limit int) error {
	_, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, int64(limit)))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return badf("request body over %d bytes", limit)
	case err != nil:
		// The client is gone, or too slow: the server's read timeout.
		return badf("reading the request body: %v", err)
	}
	return nil
}

// check answers a valid check request, over HTTP or NATS.
func (s *Server) check(req checkRequest) throttle.Result {
	text := ""
	if req.Text != nil {
		text = *req.Text
	}
	q := throttle.Query{Room: req.Room, User: req.User, Text: text, HasText: req.Text != nil, Mentions: req.Mentions, Roles: req.Roles}
	if req.Consume {
		return s.thr.Consume(s.nowMs(), q, req.ID)
	}
	return s.thr.Check(s.nowMs(), q)
}

// activeView is the body of GET /api/v1/throttle/active.
type activeView struct {
	AsOf   chat.Time         `json:"as_of"`
	Active []throttle.Active `json:"active"`
	*chat.Coverage
}

// coveredActive is a Throttle that also says how much of a group its
// active keys cover.
type coveredActive interface {
	ActiveCovered(now int64) ([]throttle.Active, *chat.Coverage)
}

// throttleActive is GET /api/v1/throttle/active.
func (s *Server) throttleActive(r *http.Request) (any, error) {
	now := s.nowMs()
	v := activeView{AsOf: chat.Time(now)}
	if c, ok := s.thr.(coveredActive); ok {
		v.Active, v.Coverage = c.ActiveCovered(now)
	} else {
		v.Active = s.thr.Active(now)
	}
	if v.Active == nil {
		v.Active = []throttle.Active{}
	}
	return v, nil
}

// window resolves a window parameter to a configured name.
func (s *Server) window(name string) (string, error) { return windowName(name, s.views.WindowNames()) }

// windowName resolves a window parameter against the configured windows:
// "" is the default, the first.
func windowName(name string, configured []string) (string, error) {
	if name == "" {
		return configured[0], nil
	}
	if !slices.Contains(configured, name) {
		return "", badf("%v %q; configured: %s", aggregator.ErrUnknownWindow, name, strings.Join(configured, ", "))
	}
	return name, nil
}

// intParam parses an optional integer parameter in [1, most].
func intParam(name, v string, def, most int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, badf("%s must be an integer 1..%d, got %q", name, most, v)
	}
	return n, nil
}

// checkName is chat.CheckName, refusing a bad name as a bad request.
func checkName(what, name string, maxLen int) error {
	if err := chat.CheckNameLen(what, name, maxLen); err != nil {
		return &badRequest{err.Error()}
	}
	return nil
}

// badRequest is an error the client made: HTTP 400, a micro error "400".
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// throttlePolicies is GET /api/v1/throttle/policies: the policies in
// force, as the program that knows where they come from says.
func (s *Server) throttlePolicies(w http.ResponseWriter, r *http.Request) {
	if s.opts.Policies == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this server has no policies to show"})
		return
	}
	writeJSON(w, http.StatusOK, s.opts.Policies())
}

// act is GET /api/v1/act: what acting on the chat system does, or 404
// without --act.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, s.opts.Act, "not acting on the chat system (see --act)")
}

// group is GET /api/v1/group: the group's members, or 404 when standalone.
func (s *Server) group(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, s.opts.Group, "not in a group: this instance runs standalone (see --group)")
}

// writeStatus answers with what status says, or 404 with why not if it
// (or what it says) is nil.
func writeStatus(w http.ResponseWriter, status func() any, why string) {
	var v any
	if status != nil {
		v = status()
	}
	if v == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": why})
		return
	}
	writeJSON(w, http.StatusOK, v)
}
