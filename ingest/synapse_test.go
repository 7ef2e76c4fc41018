package ingest

import (
	"encoding/json"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/chat"
)

// synapseBody is what synapse-http-antispam sends to check_event_for_spam
// for the event of a Dendrite envelope: {"event": ...}, the event as
// Synapse's format_event_for_client_v2 leaves it (without auth_events,
// prev_events, hashes, signatures, depth, origin, prev_state), with
// event_id. Dendrite's own keys (_event_id, _room_version) go too.
func synapseBody(t testing.TB, envelope []byte) []byte {
	t.Helper()
	ev := dendriteEvent(t, envelope)
	id := ev["_event_id"]
	for _, k := range []string{"auth_events", "prev_events", "hashes", "signatures", "depth", "origin", "prev_state", "_event_id", "_room_version"} {
		delete(ev, k)
	}
	ev["event_id"] = id
	body, err := json.Marshal(map[string]any{"event": ev})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// dendriteEvent is the event of a Dendrite envelope, by key.
func dendriteEvent(t testing.TB, envelope []byte) map[string]json.RawMessage {
	t.Helper()
	var env struct {
		E struct {
			Event map[string]json.RawMessage `json:"event"`
		} `json:"new_room_event"`
	}
	if err := json.Unmarshal(envelope, &env); err != nil {
		t.Fatal(err)
	}
	return env.E.Event
}

// SynapseEvent reads the event of each Dendrite sample, as Synapse sends
// it to be checked, by the rules --input matrix reads the sample with:
// the same Event, counted or ignored alike.
func TestSynapseEventIsMatrix(t *testing.T) {
	for name, data := range samples(t) {
		if !strings.Contains(name, "new_room_event") && strings.Contains(name, "_event") {
			continue // an envelope of another type: no event to check
		}
		t.Run(name, func(t *testing.T) {
			want, werr := Matrix().Decode(data, matrixNow, testSkew)
			body := synapseBody(t, data)
			got, err := SynapseEvent().Decode(body, matrixNow, testSkew)
			if !reflect.DeepEqual(got, want) || (err == nil) != (werr == nil) {
				t.Errorf("SynapseEvent:\n %+v %v\nMatrix:\n %+v %v\nof %s", got, err, want, werr, body)
			}
			checkMappedAgainstReference(t, synapseMapping, SynapseEvent(), body, matrixNow)
		})
	}
	for _, c := range []struct{ body, fault string }{
		{`{"event":{"type":"m.room.message","sender":"@a:x","origin_server_ts":1796155481077,"content":{"body":"hi"}}}`, "room: no value at /event/room_id"},
		{`{"user":"@a:x","room":"!r:x","is_invited":false}`, ""}, // no type: ignored
		{`{"event":`, "malformed"},
	} {
		ev, err := SynapseEvent().Decode([]byte(c.body), matrixNow, testSkew)
		switch {
		case c.fault == "" && (err != nil || ev.Counted):
			t.Errorf("%s: %+v, %v; want ignored", c.body, ev, err)
		case c.fault != "" && (err == nil || !strings.Contains(err.Error(), c.fault) && string(err.Reason) != c.fault):
			t.Errorf("%s: %+v, %v; want %q", c.body, ev, err, c.fault)
		}
	}
}

// A message marked with FiledHeader is read in chatpulse's own form,
// with the names of the consumer's format, whatever that format is; the
// same payload unmarked is read as the format says (here: Matrix, which
// ignores it).
func TestConsumerReadsFiled(t *testing.T) {
	now := time.UnixMilli(1796155490000)
	s := newSink(t, false)
	c := New(prometheus.NewRegistry(), Config{
		Format: Matrix(), Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnReject: func(m *Msg, e *Error) { t.Errorf("rejected %s: %v", m.Data, e) },
	})
	user := "@" + strings.Repeat("u", 200) + ":example.org" // longer than chatpulse's own names
	filed := AppendNative(nil, Event{Event: chat.Event{Room: "!r:example.org", User: user, TS: now.UnixMilli() - 1000, ID: "$e1", Text: "hi"}, HasText: true})
	join := AppendNative(nil, Event{Event: chat.Event{Room: "!r:example.org", User: "@b:example.org", TS: now.UnixMilli() - 900, ID: "join-1", Kind: chat.KindJoin}})
	mark := map[string][]string{FiledHeader: {"1"}}
	c.Start(&slice{[]Msg{
		{Subject: "chat.r.u", Data: filed, Header: mark, Sink: s},
		{Subject: "chat.r.b", Data: join, Header: mark, Sink: s},
		{Subject: "chat.r.u", Data: filed, Sink: s}, // unmarked
		{Subject: "DendriteOutputRoomEvent", Data: sample(t, "011-message"), Header: map[string][]string{"room_id": {"!3rYnfsG2FsJdpctO:localhost"}}, Sink: s},
	}})
	if err := c.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	v, _ := s.Agg.Overview("", 1, now.UnixMilli())
	if v.Messages != 2 || v.Joins != 1 || v.TopTalker == nil {
		t.Fatalf("%d messages, %d joins counted, want 2 and 1 (the filed message, the filed join and Dendrite's message)", v.Messages, v.Joins)
	}
	u, _ := s.Agg.User(user, "", now.UnixMilli())
	if u.Messages != 1 {
		t.Errorf("the filed message's user counts %d messages, want 1", u.Messages)
	}
}
