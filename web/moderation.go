package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/moderation"
	"github.com/chatpulse/chatpulse/rolling"
)

// Moderator keeps the moderators' actions (docs/contract.md section 11):
// engine.Moderation is one. The actions it is given are valid; an error
// is the server's (500).
type Moderator interface {
	Put(ctx context.Context, a moderation.Action) (moderation.Action, error)
	Lift(ctx context.Context, key, actor string) (bool, error)
	List(now int64) []moderation.Action
}

// actionsView is GET /api/v1/moderation.
type actionsView struct {
	AsOf    chat.Time           `json:"as_of"`
	Actions []moderation.Action `json:"actions"`
}

// liftedView is the answer of a DELETE.
type liftedView struct {
	Lifted moderation.Kind `json:"lifted"`
	Room   string          `json:"room,omitempty"`
	User   string          `json:"user,omitempty"`
}

// notFound is a request for something that is not there: 404.
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }

const actionShape = `an action is a JSON object with some of {"interval": duration (slow mode), "for": duration, "until": RFC 3339 time, "room": string (timeout), "reason": string, "actor": string, "exempt_users": [glob], "exempt_roles": [role]}`

var actionFields = map[string]kind{"interval": text, "for": text, "until": text, "room": name, "reason": text, "actor": text, "exempt_users": list, "exempt_roles": list}

// decodeAction reads the body of a PUT into a of kind, room and user.
func (s *Server) decodeAction(r *http.Request, a *moderation.Action) error {
	data, err := readBody(r, maxCheckBody)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	f, err := decodeObject(data, actionShape, actionFields)
	if err != nil {
		return err
	}
	if a.Kind == moderation.Slowmode {
		iv, ok := f["interval"]
		if !ok {
			return badf("interval: missing: a slow mode is one message per interval per user, like \"30s\"")
		}
		d, err := rolling.ParseDuration(iv)
		if err != nil || d < time.Millisecond {
			return badf("interval: %q is not a positive duration of a millisecond at least (examples: 30s, 2m)", iv)
		}
		a.Interval = d.Milliseconds()
		if _, ok := f["room"]; ok {
			return badf("room: the room of a slow mode is in the path")
		}
	} else {
		if _, ok := f["interval"]; ok {
			return badf("interval: only a slow mode has one")
		}
		room, ok := f["room"]
		if ok {
			if room == "" {
				return badf("room: empty; leave it out for a timeout everywhere")
			}
			if err := checkName("room", room, s.opts.MaxName); err != nil {
				return err
			}
		}
		a.Room = room
	}
	now := s.nowMs()
	forText, hasFor := f["for"]
	untilText, hasUntil := f["until"]
	switch {
	case hasFor && hasUntil:
		return badf("for and until: give one (neither: until it is lifted)")
	case hasFor:
		d, err := rolling.ParseDuration(forText)
		if err != nil || d < time.Millisecond {
			return badf("for: %q is not a positive duration of a millisecond at least: the action would end as it starts (examples: 10m, 1h, 7d)", forText)
		}
		u := chat.Time(now + d.Milliseconds())
		a.Until = &u
	case hasUntil:
		t, err := time.Parse(time.RFC3339Nano, untilText)
		if err != nil {
			return badf("until: %q is not an RFC 3339 time", untilText)
		}
		if t.UnixMilli() <= now {
			return badf("until: %s is not in the future", untilText)
		}
		u := chat.Time(t.UnixMilli())
		a.Until = &u
	}
	a.Reason, a.Actor = f["reason"], f["actor"]
	for field, dst := range map[string]*[]string{"exempt_users": &a.ExemptUsers, "exempt_roles": &a.ExemptRoles} {
		if raw, ok := f[field]; ok {
			if err := json.Unmarshal([]byte(raw), dst); err != nil {
				return badf("%s: must be a list of strings", field)
			}
		}
	}
	return nil
}

// put validates and puts a in force.
func (s *Server) put(r *http.Request, a moderation.Action) (any, error) {
	if s.opts.Moderation == nil {
		return nil, &notFound{"this server keeps no moderators' actions"}
	}
	if err := s.decodeAction(r, &a); err != nil {
		return nil, err
	}
	if err := a.Validate(); err != nil { // before anything is written: nothing half-applied
		return nil, badf("%v", err)
	}
	return s.opts.Moderation.Put(r.Context(), a)
}

// putSlowmode is PUT /api/v1/rooms/{room}/slowmode.
func (s *Server) putSlowmode(r *http.Request) (any, error) {
	room := r.PathValue("room")
	if err := checkName("room", room, s.opts.MaxName); err != nil {
		return nil, err
	}
	return s.put(r, moderation.Action{Kind: moderation.Slowmode, Room: room})
}

// putTimeout is PUT /api/v1/users/{user}/timeout.
func (s *Server) putTimeout(r *http.Request) (any, error) {
	user := r.PathValue("user")
	if err := checkName("user", user, s.opts.MaxName); err != nil {
		return nil, err
	}
	return s.put(r, moderation.Action{Kind: moderation.Timeout, User: user})
}

// lift is DELETE of an action: the room's slow mode, or the user's
// timeout (?room= for the one in a room).
func (s *Server) lift(kind moderation.Kind) func(*http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		if s.opts.Moderation == nil {
			return nil, &notFound{"this server keeps no moderators' actions"}
		}
		q := r.URL.Query()
		v := liftedView{Lifted: kind}
		if kind == moderation.Slowmode {
			v.Room = r.PathValue("room")
			if err := checkName("room", v.Room, s.opts.MaxName); err != nil {
				return nil, err
			}
		} else {
			v.User, v.Room = r.PathValue("user"), q.Get("room")
			if err := checkName("user", v.User, s.opts.MaxName); err != nil {
				return nil, err
			}
			if q.Has("room") {
				if err := checkName("room", v.Room, s.opts.MaxName); err != nil {
					return nil, err
				}
			}
		}
		actor := q.Get("actor")
		if len(actor) > 512 {
			return nil, badf("actor: at most 512 bytes")
		}
		ok, err := s.opts.Moderation.Lift(r.Context(), moderation.KeyOf(kind, v.Room, v.User), actor)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &notFound{fmt.Sprintf("no %s in force for %s", kind, describe(v.Room, v.User))}
		}
		return v, nil
	}
}

func describe(room, user string) string {
	switch {
	case user == "":
		return "room " + room
	case room == "":
		return "user " + user + " (everywhere)"
	}
	return "user " + user + " in room " + room
}

// listActions is GET /api/v1/moderation: every action in force, or with
// ?room= those that hold in the room (its slow mode, the timeouts in it or
// everywhere), with ?user= those of the user.
func (s *Server) listActions(r *http.Request) (any, error) {
	q := r.URL.Query()
	for _, f := range []string{"room", "user"} {
		if q.Has(f) {
			if err := checkName(f, q.Get(f), s.opts.MaxName); err != nil {
				return nil, err
			}
		}
	}
	now := s.nowMs()
	v := actionsView{AsOf: chat.Time(now), Actions: []moderation.Action{}}
	if s.opts.Moderation == nil {
		return v, nil
	}
	for _, a := range s.opts.Moderation.List(now) {
		inRoom := a.Room == q.Get("room") || a.Kind == moderation.Timeout && a.Room == ""
		if q.Has("room") && !inRoom {
			continue
		}
		if q.Has("user") && a.User != q.Get("user") {
			continue
		}
		v.Actions = append(v.Actions, a)
	}
	return v, nil
}
