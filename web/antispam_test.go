package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
)

// moduleEvent is the body synapse-http-antispam posts to
// check_event_for_spam: {"event": format_event_for_client_v2(event) with
// event_id}. Synapse's own keys of the event (unsigned, its hashes and
// signatures are dropped by the format) come along.
func moduleEvent(typ, id, room, sender, stateKey string, ts int64, content map[string]any) []byte {
	ev := map[string]any{"type": typ, "event_id": id, "room_id": room, "sender": sender, "origin_server_ts": ts,
		"content": content, "unsigned": map[string]any{"age_ts": ts}}
	if stateKey != "" {
		ev["state_key"] = stateKey
	}
	b, _ := json.Marshal(map[string]any{"event": ev})
	return b
}

// synapseServer is a web server over a real aggregator and throttle set
// of policies, with the token "s3cret", whose filings are recorded.
type synapseServer struct {
	*Server
	now   time.Time
	mu    sync.Mutex
	filed []ingest.Event
	fail  error // what filing answers
}

func newSynapseServer(t *testing.T, policies []throttle.Policy) *synapseServer {
	t.Helper()
	thr, err := throttle.NewSet(policies)
	if err != nil {
		t.Fatal(err)
	}
	ss := &synapseServer{now: testNow}
	ss.Server = New(newAggregator(t), setThrottle{thr}, Options{Now: func() time.Time { return ss.now }, AuthToken: "s3cret",
		File: func(_ context.Context, ev ingest.Event) error {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			if ss.fail != nil {
				return ss.fail
			}
			ev.Room, ev.User, ev.ID, ev.Text = strings.Clone(ev.Room), strings.Clone(ev.User), strings.Clone(ev.ID), strings.Clone(ev.Text)
			ss.filed = append(ss.filed, ev)
			return nil
		}})
	return ss
}

// post posts body to the callback as the module does, and returns the
// status and the answer's JSON object.
func (ss *synapseServer) post(t *testing.T, callback string, body []byte, token string) (int, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/api/v1/matrix/antispam/"+callback, strings.NewReader(string(body)))
	r.Host = "localhost"
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	ss.ServeHTTP(w, r)
	var v map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s: %d %q: %v", callback, w.Code, w.Body, err)
	}
	return w.Code, v
}

// Each callback answers in the shape the module reads: 200 {} for
// allowed, 429 M_LIMIT_EXCEEDED with retry_after_ms naming the policy for
// a message denied, 403 M_FORBIDDEN for a join denied, 400 M_BAD_JSON
// for a bad body; what is allowed is filed once, what is denied or
// ignored is not; the token is needed.
func TestAntispamAnswers(t *testing.T) {
	ss := newSynapseServer(t, []throttle.Policy{
		{Name: "flood", Scope: throttle.ScopeUserInRoom, Algorithm: throttle.AlgSlidingWindow, Limit: 2, Window: time.Minute},
		{Name: "raid", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgJoinWave, Limit: 1, Window: time.Minute, Act: []throttle.ActKind{throttle.ActLock}, LockFor: time.Hour},
	})
	now := testNow.UnixMilli()
	msg := func(i int) []byte {
		return moduleEvent("m.room.message", fmt.Sprint("$m", i), "!r:hs", "@a:hs", "", now, map[string]any{"msgtype": "m.text", "body": fmt.Sprint("hi ", i)})
	}
	for i, c := range []struct {
		callback string
		body     []byte
		status   int
		errcode  string
	}{
		{"check_event_for_spam", msg(1), 200, ""},
		{"check_event_for_spam", msg(1), 200, ""}, // asked again (federation does): the same answer, counted once
		{"check_event_for_spam", msg(2), 200, ""},
		{"check_event_for_spam", msg(3), 429, "M_LIMIT_EXCEEDED"},
		{"check_event_for_spam", moduleEvent("m.room.message", "$e", "!r:hs", "@a:hs", "", now, map[string]any{"body": "* fixed", "m.relates_to": map[string]any{"rel_type": "m.replace", "event_id": "$m1"}}), 200, ""},
		{"check_event_for_spam", moduleEvent("m.reaction", "$x", "!r:hs", "@a:hs", "", now, map[string]any{}), 200, ""},
		{"check_event_for_spam", moduleEvent("m.room.message", "$old", "!r:hs", "@b:hs", "", now-2*time.Hour.Milliseconds(), map[string]any{"body": "history"}), 200, ""},
		{"check_event_for_spam", moduleEvent("m.room.member", "$j1", "!r:hs", "@c:remote", "@c:remote", now, map[string]any{"membership": "join"}), 200, ""},
		{"check_event_for_spam", moduleEvent("m.room.member", "$j2", "!r:hs", "@d:remote", "@d:remote", now, map[string]any{"membership": "join"}), 403, "M_FORBIDDEN"},
		{"check_event_for_spam", moduleEvent("m.room.member", "$l", "!r:hs", "@c:remote", "@c:remote", now, map[string]any{"membership": "leave"}), 200, ""},
		{"user_may_join_room", []byte(`{"user":"@e:hs","room":"!r:hs","is_invited":false}`), 403, "M_FORBIDDEN"},
		{"user_may_join_room", []byte(`{"user_id":"@e:hs","room_id":"!r:hs","is_invited":false}`), 403, "M_FORBIDDEN"},
		{"user_may_join_room", []byte(`{"user":"@f:hs","room":"!r:hs","is_invited":true}`), 200, ""},
		{"user_may_join_room", []byte(`{"user":"@g:hs","room":"!quiet:hs","is_invited":false}`), 200, ""},
		{"check_event_for_spam", []byte(`{"event":`), 400, "M_BAD_JSON"},
		{"check_event_for_spam", []byte(`{"event":{"type":"m.room.message","room_id":"!r:hs","sender":"@a:hs","origin_server_ts":1}}`), 400, "M_BAD_JSON"},
		{"user_may_join_room", []byte(`{"room":"!r:hs"}`), 400, "M_BAD_JSON"},
		{"user_may_invite", []byte(`{"inviter":"@a:hs","invitee":"@b:hs","room_id":"!r:hs"}`), 200, ""},
	} {
		status, v := ss.post(t, c.callback, c.body, "s3cret")
		if errcode, _ := v["errcode"].(string); status != c.status || errcode != c.errcode {
			t.Errorf("%d %s %s: %d %v, want %d %s", i, c.callback, c.body, status, v, c.status, c.errcode)
		}
		if status == 200 && len(v) != 0 {
			t.Errorf("%d %s: allowed with %v, want {}", i, c.callback, v)
		}
		if c.errcode == "M_LIMIT_EXCEEDED" && (!strings.Contains(fmt.Sprint(v["error"]), "flood (2 of 2)") || v["retry_after_ms"] == nil || v["retry_after_ms"].(float64) <= 0) {
			t.Errorf("%d: %v, want the error to name flood and a wait", i, v)
		}
		if c.errcode == "M_FORBIDDEN" && !strings.Contains(fmt.Sprint(v["error"]), "raid") {
			t.Errorf("%d: %v, want the error to name raid", i, v)
		}
	}
	var filed []string
	for _, ev := range ss.filed {
		id := ev.ID
		if strings.HasPrefix(id, "join-") && len(id) == len("join-")+32 {
			id = "join-<random>"
		}
		filed = append(filed, fmt.Sprintf("%s %s %s %s %q %v", ev.Kind, ev.Room, ev.User, id, ev.Text, ev.TS == now))
	}
	want := []string{
		`message !r:hs @a:hs $m1 "hi 1" true`, `message !r:hs @a:hs $m1 "hi 1" true`, `message !r:hs @a:hs $m2 "hi 2" true`,
		`join !r:hs @c:remote $j1 "" true`, `join !r:hs @f:hs join-<random> "" true`, `join !quiet:hs @g:hs join-<random> "" true`,
	}
	if fmt.Sprint(filed) != fmt.Sprint(want) {
		t.Errorf("filed\n %q\nwant\n %q", filed, want)
	}

	if status, v := ss.post(t, "ping", []byte(`{"id":"AbCdEfGh"}`), "s3cret"); status != 200 || v["id"] != "AbCdEfGh" || v["status"] != "ok" {
		t.Errorf("ping: %d %v", status, v)
	}
	for _, token := range []string{"", "wrong"} {
		if status, _ := ss.post(t, "check_event_for_spam", msg(9), token); status != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", token, status)
		}
	}
	ss.fail = errors.New("no stream")
	ss.now = testNow.Add(time.Hour)
	late := moduleEvent("m.room.message", "$m10", "!r:hs", "@a:hs", "", ss.now.UnixMilli(), map[string]any{"body": "hi"})
	if status, _ := ss.post(t, "check_event_for_spam", late, "s3cret"); status != 200 || len(ss.filed) != len(want) || testutil.ToFloat64(ss.anti.unfiled) != 1 {
		t.Errorf("a filing that fails: %d, %d filed, %v counted unfiled; want the check's answer, 200, nothing filed, 1 unfiled",
			status, len(ss.filed), testutil.ToFloat64(ss.anti.unfiled))
	}
}

func TestDecodeJoinCheck(t *testing.T) {
	long := "@" + strings.Repeat("u", 200) + ":hs"
	for _, c := range []struct {
		body    string
		maxName int
		want    joinCheck
		err     string
	}{
		{`{"user":"@a:hs","room":"!r:hs","is_invited":false}`, 128, joinCheck{User: "@a:hs", Room: "!r:hs"}, ""},
		{`{"user_id":"@a:hs","room_id":"!r:hs","is_invited":true}`, 128, joinCheck{User: "@a:hs", Room: "!r:hs", Invited: true}, ""},
		{`{"user":"@a:hs","user_id":"@a:hs","room_id":"!r:hs"}`, 128, joinCheck{User: "@a:hs", Room: "!r:hs"}, ""},
		{`{"user":"@a:hs","room":"!r:hs","is_invited":false,"via":{"servers":["a","b"]},"n":[1,{"x":"}"}],"f":-1.5e3,"t":true}`, 128, joinCheck{User: "@a:hs", Room: "!r:hs"}, ""},
		{`{"user":"` + long + `","room":"!r:hs"}`, 255, joinCheck{User: long, Room: "!r:hs"}, ""},
		{`{"user":"` + long + `","room":"!r:hs"}`, 128, joinCheck{}, "--input matrix"},
		{`{"user":"@a:hs","user_id":"@b:hs","room":"!r:hs"}`, 128, joinCheck{}, "user and user_id differ"},
		{`{"room":"!r:hs"}`, 128, joinCheck{}, "user: missing"},
		{`{"user":"@a:hs"}`, 128, joinCheck{}, "room: missing"},
		{`{"user":"@a:hs","room":"!r:hs","is_invited":"yes"}`, 128, joinCheck{}, "is_invited: must be true or false"},
		{`{"user":"@a:hs","user":"@b:hs","room":"!r:hs"}`, 128, joinCheck{}, "user: duplicate key"},
		{`{"user":"\ud800","room":"!r:hs"}`, 128, joinCheck{}, "user: must be valid UTF-8"},
		{`["@a:hs"]`, 128, joinCheck{}, "the body is"},
	} {
		got, err := decodeJoinCheck([]byte(c.body), c.maxName)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %+v %v, want %+v %q", c.body, got, err, c.want, c.err)
		}
	}
}

// FuzzDecodeJoinCheck: a body is refused as a bad request, or read as a
// join whose names follow the rule of names; written again in the
// module's shape, it reads the same.
func FuzzDecodeJoinCheck(f *testing.F) {
	for _, s := range []string{
		`{"user":"@a:hs","room":"!r:hs","is_invited":false}`, `{"user_id":"@a:hs","room_id":"!r:hs","is_invited":true}`,
		`{"user":"@a:hs","room_id":"!r:hs","extra":{"a":[1,"]"]}}`, `{"user":"\ud800","room":"r"}`, `{}`, `null`, `{"user":"a","user":"a","room":"r"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		j, err := decodeJoinCheck(body, chat.MaxNameLen)
		if refused(t, body, err) {
			return
		}
		for _, n := range []string{j.User, j.Room} {
			if err := chat.CheckName("name", n); err != nil {
				t.Fatalf("%q: accepted %+v: %v", body, j, err)
			}
		}
		again, err := json.Marshal(map[string]any{"user": j.User, "room": j.Room, "is_invited": j.Invited})
		if err != nil {
			t.Fatal(err)
		}
		if j2, err := decodeJoinCheck(again, chat.MaxNameLen); err != nil || j2 != j {
			t.Fatalf("%q: %+v, written again %s: %+v %v", body, j, again, j2, err)
		}
	})
}

// FuzzDecodeSpamCheck: a body is refused as a bad request, or read as
// an event to ignore, or as a message or a join with an event id and
// names that follow the rule of names; written again as the module
// writes it, it reads the same.
func FuzzDecodeSpamCheck(f *testing.F) {
	now := testNow.UnixMilli()
	for _, b := range [][]byte{
		moduleEvent("m.room.message", "$m1", "!r:hs", "@a:hs", "", now, map[string]any{"msgtype": "m.text", "body": "hi <b>"}),
		moduleEvent("m.room.member", "$j1", "!r:hs", "@a:hs", "@b:hs", now, map[string]any{"membership": "join"}),
		moduleEvent("m.room.member", "$j1", "!r:hs", "@a:hs", "@b:hs", now, map[string]any{"membership": "leave"}),
		moduleEvent("m.room.message", "$e", "!r:hs", "@a:hs", "", now, map[string]any{"body": "x", "m.relates_to": map[string]any{"rel_type": "m.replace"}}),
		moduleEvent("m.room.message", "", "!r:hs", "@a:hs", "", now, map[string]any{}),
		[]byte(`{"event":{"type":"m.room.message","event_id":"$1","room_id":"\ud800","sender":"@a:hs","origin_server_ts":1}}`),
		[]byte(`{"event":null}`), []byte(`{}`), []byte(`[]`),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := decodeSpamCheck(body, chat.MaxNameLen, now)
		if refused(t, body, err) {
			return
		}
		if !ev.Counted {
			return
		}
		if ev.ID == "" || len(ev.ID) > maxEventID || chat.CheckName("room", ev.Room) != nil || chat.CheckName("user", ev.User) != nil {
			t.Fatalf("%q: accepted %+v", body, ev)
		}
		content := map[string]any{}
		typ, sender, stateKey := "m.room.message", ev.User, ""
		switch ev.Kind {
		case chat.KindJoin, chat.KindLeave:
			typ, sender, stateKey = "m.room.member", "@someone:hs", ev.User
			content["membership"] = map[chat.Kind]string{chat.KindJoin: "join", chat.KindLeave: "leave"}[ev.Kind]
		}
		if ev.HasText {
			content["body"] = ev.Text
		}
		again := moduleEvent(typ, ev.ID, ev.Room, sender, stateKey, ev.TS, content)
		if ev2, err := decodeSpamCheck(again, chat.MaxNameLen, now); err != nil || !reflect.DeepEqual(ev2, ev) {
			t.Fatalf("%q: %+v, written again %s: %+v %v", body, ev, again, ev2, err)
		}
	})
}
