package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
)

// Asked by Synapse (docs/contract.md section 14). The Synapse module
// synapse-http-antispam POSTs each spam check it is configured for to
// <base_url>/<callback> as JSON, with Authorization: Bearer <token>, and
// takes any 2xx as "not spam" and anything else, with its errcode, as a
// refusal. chatpulse's base_url is /api/v1/matrix/antispam, behind the
// API's token like every route under /api/. It answers three callbacks:
//
//   - check_event_for_spam: a message (not an edit) is a consuming check
//     keyed by its event_id; a join (a member event of another server's
//     user) a join's. Allowed: 200 {} and the event is filed on the chat
//     stream (Options.File). A message denied: 429 M_LIMIT_EXCEEDED with
//     retry_after_ms; a join denied: 403 M_FORBIDDEN. Anything else (and
//     an event older than every window: history Synapse backfills) is
//     allowed and ignored.
//   - user_may_join_room: a local user's join, a join's consuming check
//     unless the user is invited; allowed, filed as a join.
//   - ping: answered with its id.
//
// A body that does not parse is 400 M_BAD_JSON. Every other callback is
// allowed: 200 {}.

// The answers' errcodes, Matrix's.
const (
	errBadJSON   = "M_BAD_JSON"
	errLimited   = "M_LIMIT_EXCEEDED"
	errForbidden = "M_FORBIDDEN"
)

// maxEventID is the longest event id, in bytes: Matrix's limit.
const maxEventID = 255

// fileWait bounds the filing of what a check allowed.
const fileWait = 5 * time.Second

// matrixError is an error answer in Matrix's shape, which the module
// hands to Synapse as it is.
type matrixError struct {
	ErrCode      string `json:"errcode"`
	Error        string `json:"error"`
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
}

// antispam counts what Synapse asks: chatpulse_synapse_checks_total and
// chatpulse_synapse_unfiled_total.
type antispam struct {
	checks  *prometheus.CounterVec
	unfiled prometheus.Counter
}

// The results of chatpulse_synapse_checks_total.
const (
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultIgnored = "ignored"
	resultBad     = "bad"
)

func newAntispam(reg prometheus.Registerer) antispam {
	a := antispam{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatpulse_synapse_checks_total",
			Help: "Spam checks Synapse asked through synapse-http-antispam, by callback (other: one chatpulse does not judge) and result: allowed, denied, ignored (not a message or a join, or history), bad (400).",
		}, []string{"callback", "result"}),
		unfiled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatpulse_synapse_unfiled_total",
			Help: "Events Synapse's checks allowed that could not be filed on the chat stream: counted by the throttle policies, not by the views.",
		}),
	}
	for _, cb := range []string{"check_event_for_spam", "user_may_join_room"} {
		for _, r := range []string{resultAllowed, resultDenied, resultIgnored, resultBad} {
			a.checks.WithLabelValues(cb, r)
		}
	}
	a.checks.WithLabelValues("other", resultIgnored)
	reg.MustRegister(a.checks, a.unfiled)
	return a
}

// checkEventForSpam is POST /api/v1/matrix/antispam/check_event_for_spam.
func (s *Server) checkEventForSpam(w http.ResponseWriter, r *http.Request) {
	const callback = "check_event_for_spam"
	body, err := readBody(r, ingest.MaxMatrixPayload)
	if err != nil {
		s.badJSON(w, callback, err)
		return
	}
	now := s.nowMs()
	ev, err := decodeSpamCheck(body, s.opts.MaxName, now)
	if err != nil {
		s.badJSON(w, callback, err)
		return
	}
	if !ev.Counted || ev.Kind == chat.KindLeave || ev.TS <= now-s.largestWindow() {
		s.anti.checks.WithLabelValues(callback, resultIgnored).Inc()
		writeJSON(w, http.StatusOK, struct{}{})
		return
	}
	s.judge(w, r, callback, now, ev, true)
}

// userMayJoinRoom is POST /api/v1/matrix/antispam/user_may_join_room.
func (s *Server) userMayJoinRoom(w http.ResponseWriter, r *http.Request) {
	const callback = "user_may_join_room"
	body, err := readBody(r, maxCheckBody)
	if err != nil {
		s.badJSON(w, callback, err)
		return
	}
	j, err := decodeJoinCheck(body, s.opts.MaxName)
	if err != nil {
		s.badJSON(w, callback, err)
		return
	}
	now := s.nowMs()
	ev := ingest.Event{Event: chat.Event{Room: j.Room, User: j.User, TS: now, ID: joinID(), Kind: chat.KindJoin}, Counted: true}
	// An invited join is not checked: a room locked against a wave lets
	// in whom its moderators invite. It counts where it arrives, as any
	// join on the bus.
	s.judge(w, r, callback, now, ev, !j.Invited)
}

// judge answers Synapse about ev, a message or a join: if check, by a
// consuming check (denied: 429 for a message, 403 for a join); allowed,
// it files ev and answers 200 {}.
func (s *Server) judge(w http.ResponseWriter, r *http.Request, callback string, now int64, ev ingest.Event, check bool) {
	if check {
		res := s.thr.Consume(now, throttle.Query{Room: ev.Room, User: ev.User, Text: ev.Text, HasText: ev.HasText, Mentions: ev.Mentions, Kind: ev.Kind}, ev.ID)
		switch {
		case !res.Allowed && ev.Kind == chat.KindJoin:
			s.anti.checks.WithLabelValues(callback, resultDenied).Inc()
			writeJSON(w, http.StatusForbidden, lockedError(res))
			return
		case !res.Allowed:
			s.anti.checks.WithLabelValues(callback, resultDenied).Inc()
			writeJSON(w, http.StatusTooManyRequests, limitedError(res))
			return
		}
	}
	s.anti.checks.WithLabelValues(callback, resultAllowed).Inc()
	s.file(r.Context(), ev)
	writeJSON(w, http.StatusOK, struct{}{})
}

// antispamPing is POST /api/v1/matrix/antispam/ping: the module's
// do_ping, which wants its id back and "status": "ok".
func (s *Server) antispamPing(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, maxCheckBody)
	if err == nil {
		var f fields
		if f, err = decodeFields(body, pingShape, pingFields, true); err == nil {
			if id, ok := f["id"]; ok {
				writeJSON(w, http.StatusOK, map[string]string{"id": id, "status": "ok"})
				return
			}
			err = badf("id: missing; %s", pingShape)
		}
	}
	writeJSON(w, http.StatusBadRequest, matrixError{ErrCode: errBadJSON, Error: err.Error()})
}

// antispamOther answers every other callback (the module enables them
// all unless its enabled_callbacks says otherwise: invites, logins, room
// creation...) with 200 {}: chatpulse judges messages and joins, and
// has nothing to say against anything else.
func (s *Server) antispamOther(w http.ResponseWriter, r *http.Request) {
	s.anti.checks.WithLabelValues("other", resultIgnored).Inc()
	writeJSON(w, http.StatusOK, struct{}{})
}

// badJSON answers a body that does not parse.
func (s *Server) badJSON(w http.ResponseWriter, callback string, err error) {
	s.anti.checks.WithLabelValues(callback, resultBad).Inc()
	writeJSON(w, http.StatusBadRequest, matrixError{ErrCode: errBadJSON, Error: err.Error()})
}

// file files what a check allowed (Options.File), and logs and counts
// what it could not file: the throttle policies counted it, the views
// will not.
func (s *Server) file(ctx context.Context, ev ingest.Event) {
	if s.opts.File == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fileWait)
	defer cancel()
	if err := s.opts.File(ctx, ev); err != nil {
		s.anti.unfiled.Inc()
		s.opts.Log.Warn("an event Synapse's check allowed is not filed: the views do not count it", "room", ev.Room, "user", ev.User, "id", ev.ID, "err", err)
	}
}

// largestWindow is the largest window, in ms: an event older than it is
// history, which no window counts.
func (s *Server) largestWindow() int64 {
	var l float64
	for _, w := range s.views.Windows().Windows {
		l = max(l, w.Seconds)
	}
	return int64(l * 1000)
}

// limitedError is the answer to a message a consuming check denied.
func limitedError(res throttle.Result) matrixError {
	by, retry := denials(res)
	msg := "rate limited by chatpulse: " + by
	if by == "" {
		msg = "chatpulse cannot decide now (part of its group is being taken over); try again"
		retry = 1000
	}
	return matrixError{ErrCode: errLimited, Error: msg, RetryAfterMs: &retry}
}

// lockedError is the answer to a join a consuming check denied.
func lockedError(res throttle.Result) matrixError {
	by, retry := denials(res)
	msg := fmt.Sprintf("this room is locked against a wave of joins by chatpulse: %s, for %s more", by, time.Duration(retry)*time.Millisecond)
	if by == "" {
		msg = "chatpulse cannot decide now (part of its group is being taken over); try again"
	}
	return matrixError{ErrCode: errForbidden, Error: msg}
}

// denials names the enforcing decisions that deny, with their counts, and
// the longest of their waits (ms).
func denials(res throttle.Result) (by string, retry int64) {
	var names []string
	for _, d := range res.Decisions {
		if d.Allowed || d.Mode != throttle.ModeEnforce {
			continue
		}
		name := d.Policy
		if d.Limit > 0 {
			name += fmt.Sprintf(" (%d of %d)", d.Count, d.Limit)
		}
		names = append(names, name)
		retry = max(retry, d.RetryAfterMs)
	}
	return strings.Join(names, ", "), retry
}

// joinID is the id a join Synapse asked about is checked and filed under:
// Synapse names no event before the join is made.
func joinID() string {
	var b [16]byte
	rand.Read(b[:])
	return "join-" + hex.EncodeToString(b[:])
}

// decodeSpamCheck reads the body of check_event_for_spam: {"event": ...},
// the event in Synapse's client format v2 with its event_id, read by the
// rules of --input matrix (ingest.SynapseEvent). A message or a join
// carries an event_id, and names of up to maxName bytes.
func decodeSpamCheck(body []byte, maxName int, now int64) (ingest.Event, error) {
	ev, ierr := ingest.SynapseEvent().Decode(body, now, math.MaxInt64) // a ts ahead is Synapse's to judge
	switch {
	case ierr != nil:
		return ingest.Event{}, badf("%s: %s; the body is {\"event\": the event, with event_id}", ierr.Reason, ierr.Msg)
	case !ev.Counted:
		return ev, nil
	case ev.ID == "" || len(ev.ID) > maxEventID:
		return ingest.Event{}, badf("event.event_id: must be 1..%d bytes, got %d", maxEventID, len(ev.ID))
	}
	user := "event.sender"
	if ev.Kind != chat.KindMessage {
		user = "event.state_key" // a member event's user
	}
	for _, n := range []struct{ field, v string }{{"event.room_id", ev.Room}, {user, ev.User}} {
		if err := checkSynapseName(n.field, n.v, maxName); err != nil {
			return ingest.Event{}, err
		}
	}
	return ev, nil
}

// joinCheck is the body of user_may_join_room.
type joinCheck struct {
	User, Room string
	Invited    bool
}

const joinShape = `the body is {"user": string, "room": string, "is_invited": boolean}, or with user_id and room_id`

// joinFields are both shapes' fields: synapse-http-antispam sends user
// and room, docs/contract.md section 14 says user_id and room_id.
var joinFields = map[string]kind{"user": name, "room": name, "user_id": name, "room_id": name, "is_invited": boolean}

// decodeJoinCheck reads the body of user_may_join_room, in either shape.
// Fields it does not know are skipped: a newer module may send more.
func decodeJoinCheck(body []byte, maxName int) (joinCheck, error) {
	f, err := decodeFields(body, joinShape, joinFields, true)
	if err != nil {
		return joinCheck{}, err
	}
	var j joinCheck
	for _, n := range []struct {
		to           *string
		field, alias string
	}{{&j.User, "user", "user_id"}, {&j.Room, "room", "room_id"}} {
		v, ok := f[n.field]
		w, alias := f[n.alias]
		switch {
		case ok && alias && v != w:
			return joinCheck{}, badf("%s and %s differ: give one", n.field, n.alias)
		case !ok && !alias:
			return joinCheck{}, badf("%s: missing; %s", n.field, joinShape)
		case !ok:
			v, n.field = w, n.alias
		}
		if err := checkSynapseName(n.field, v, maxName); err != nil {
			return joinCheck{}, err
		}
		*n.to = v
	}
	j.Invited = f["is_invited"] == "true"
	return j, nil
}

const pingShape = `the body is {"id": string}`

var pingFields = map[string]kind{"id": text}

// checkSynapseName is checkName, saying what to do about a Matrix id
// longer than chatpulse's own names.
func checkSynapseName(field, v string, maxName int) error {
	err := checkName(field, v, maxName)
	if err != nil && maxName < chat.MaxForeignNameLen && len(v) > maxName && len(v) <= chat.MaxForeignNameLen {
		return badf("%v: Matrix ids run to %d bytes; run chatpulse with --input matrix to take them", err, chat.MaxForeignNameLen)
	}
	return err
}
