package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatpulse/chatpulse/internal/wait"
)

type frame struct {
	Type    string          `json:"type"`
	View    string          `json:"view"`
	Window  string          `json:"window"`
	Room    string          `json:"room"`
	Data    json.RawMessage `json:"data"`
	Error   string          `json:"error"`
	Omitted int             `json:"omitted"`
}

// dial opens /ws with the given Origin header ("" for none).
func (tm *testMain) dial(origin string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	return websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(tm.url, "http")+"/ws", h)
}

// wsClient reads frames on its own goroutine, so that waiting for one
// with a timeout leaves the connection usable.
type wsClient struct {
	*websocket.Conn
	frames chan frame
}

func (tm *testMain) mustDial() *wsClient {
	tm.t.Helper()
	c, _, err := tm.dial(tm.url)
	if err != nil {
		tm.t.Fatal(err)
	}
	tm.t.Cleanup(func() { c.Close() })
	return &wsClient{Conn: c}
}

// reading starts the reader; without it the client never reads.
func (c *wsClient) reading(t *testing.T) *wsClient {
	c.frames = make(chan frame, 1024)
	go func() {
		defer close(c.frames)
		for {
			_, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			var f frame
			if err := json.Unmarshal(b, &f); err != nil {
				t.Errorf("frame %s: %v", b, err)
				return
			}
			c.frames <- f
		}
	}()
	return c
}

func send(t *testing.T, c *wsClient, msg string) {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// next returns the next frame, waiting at most d.
func next(t *testing.T, c *wsClient, d time.Duration) (frame, bool) {
	t.Helper()
	select {
	case f, ok := <-c.frames:
		return f, ok
	case <-time.After(d):
		return frame{}, false
	}
}

// withoutAsOf drops as_of from a view's JSON, for comparing views taken at
// different moments.
func withoutAsOf(t *testing.T, b []byte) string {
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "as_of")
	out, _ := json.Marshal(v)
	return string(out)
}

func TestWebsocket(t *testing.T) {
	tm := startMain(t, "--push-interval", "100ms", "--allowed-origins", "https://ok.example")
	for i := range 3 {
		tm.publish("chat.lobby.alice", fmt.Sprintf(`{"room":"lobby","user":"u%d"}`, i))
	}
	tm.waitReceived(3)
	c := tm.mustDial().reading(t)

	// Subscribing answers at once with the HTTP view.
	send(t, c, `{"type":"subscribe","view":"overview","window":"5m"}`)
	f, ok := next(t, c, 5*time.Second)
	if !ok || f.Type != "view" || f.View != "overview" || f.Window != "5m" || f.Room != "" {
		t.Fatalf("first frame: %+v", f)
	}
	var httpView json.RawMessage
	tm.get("/api/v1/overview?window=5m", &httpView)
	if withoutAsOf(t, f.Data) != withoutAsOf(t, httpView) {
		t.Fatalf("ws view %s\nhttp view %s", f.Data, httpView)
	}

	// Events flow: updates arrive.
	send(t, c, `{"type":"subscribe","view":"room","room":"a/b"}`)
	if f, ok := next(t, c, 5*time.Second); !ok || f.View != "room" || f.Room != "a/b" || f.Window != "1m" {
		t.Fatalf("room frame: %+v", f)
	}
	tm.publish("chat.x.y", `{"room":"a/b","user":"carol"}`)
	tm.publish("chat.x.y", `{"room":"lobby","user":"dave"}`)
	seen := map[string]bool{}
	for !seen["overview"] || !seen["room"] {
		f, ok := next(t, c, 5*time.Second)
		if !ok {
			t.Fatalf("no update after new events (saw %v)", seen)
		}
		var v struct{ Messages int64 }
		json.Unmarshal(f.Data, &v)
		if (f.View == "overview" && v.Messages == 5) || (f.View == "room" && v.Messages == 1) {
			seen[f.View] = true
		}
	}

	// Unsubscribing stops them; the other view keeps coming. The hub
	// serves a connection's frames in order, so once the first version of
	// a view subscribed after the unsubscribe is here, the unsubscribe was
	// served: an overview queued before it has come or was dropped.
	other := tm.mustDial().reading(t)
	send(t, other, `{"type":"subscribe","view":"overview","window":"5m"}`)
	frameWhere(t, other, "the other dashboard's overview", func(f frame) bool { return f.View == "overview" })
	send(t, c, `{"type":"unsubscribe","view":"overview","window":"5m"}`)
	send(t, c, `{"type":"subscribe","view":"room","room":"a/b","window":"5m"}`)
	frameWhere(t, c, "a/b's 5m view", func(f frame) bool { return f.View == "room" && f.Window == "5m" })
	tm.publish("chat.x.y", `{"room":"a/b","user":"erin"}`)
	// The other dashboard says when the hub pushed the overview with
	// erin's message: had c still watched it, the hub would have queued
	// it to c then too, before the first version of a/b's 1h view, asked
	// for after that.
	frameWhere(t, other, "the overview with erin's message", func(f frame) bool { return f.View == "overview" && messages(f) == 6 })
	send(t, c, `{"type":"subscribe","view":"room","room":"a/b","window":"1h"}`)
	for marker, room := false, false; !marker || !room; {
		f := frameWhere(t, c, "a/b's 1h view and erin's message in its 1m view", func(frame) bool { return true })
		switch {
		case f.View == "overview":
			t.Fatalf("overview pushed after unsubscribe: %+v", f)
		case f.View == "room" && f.Window == "1h":
			marker = true
		case f.View == "room" && f.Window == "1m" && messages(f) == 2:
			room = true
		}
	}

	// Bad frames get error frames, and the connection stays open.
	for msg, want := range map[string]string{
		`not json`:                           "frames are JSON objects",
		`{"type":"subscribe","view":"nope"}`: `view must be overview, room, rooms, alerts or acts, got "nope"`,
		`{"type":"subscribe","view":"overview","window":"2m"}`: `unknown window "2m"; configured: 1m, 5m, 1h`,
		`{"type":"subscribe","view":"room","room":""}`:         "room: must be 1..128 bytes, got 0",
		`{"type":"dance"}`: "type must be subscribe or unsubscribe",
		`{"type":"subscribe","view":"overview","room":"lobby"}`: "view overview takes no room",
	} {
		send(t, c, msg)
		for {
			f, ok := next(t, c, 5*time.Second)
			if !ok {
				t.Fatalf("%s: no error frame", msg)
			}
			if f.Type == "error" {
				if !strings.Contains(f.Error, want) {
					t.Fatalf("%s: error %q, want %q", msg, f.Error, want)
				}
				break
			}
		}
	}
	send(t, c, `{"type":"subscribe","view":"rooms","window":"1h"}`)
	for {
		f, ok := next(t, c, 5*time.Second)
		if !ok {
			t.Fatal("connection unusable after bad frames")
		}
		if f.View == "rooms" {
			break
		}
	}

	// A foreign origin is refused; an allowed one is not.
	if _, resp, err := tm.dial("https://evil.example"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: %v %v", err, resp)
	}
	if ok, _, err := tm.dial("https://ok.example"); err != nil {
		t.Fatalf("allowed origin: %v", err)
	} else {
		ok.Close()
	}
}

// frameWhere reads c's frames until one that match accepts, and fails
// the test if none comes within 10 s.
func frameWhere(t *testing.T, c *wsClient, what string, match func(frame) bool) frame {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				t.Fatalf("%s: connection closed", what)
			}
			if match(f) {
				return f
			}
		case <-deadline:
			t.Fatalf("%s: no such frame in 10 s", what)
		}
	}
}

// messages is the message count of a view frame.
func messages(f frame) int64 {
	var v struct{ Messages int64 }
	json.Unmarshal(f.Data, &v)
	return v.Messages
}

// A client that never reads holds nothing up: ingest counts everything
// just as without it, and a reading client on the same views keeps getting
// updates while the stuck one's socket is full.
func TestSlowClient(t *testing.T) {
	tm := startMain(t, "--push-interval", "50ms", "--jetstream=false")
	const rooms = 1000
	phase := func(stuck bool, base int) (frames int) {
		var s *wsClient
		if stuck {
			s = tm.mustDial()
			// Big views, so its socket fills within a few pushes.
			send(t, s, `{"type":"subscribe","view":"rooms","window":"1m"}`)
			send(t, s, `{"type":"subscribe","view":"rooms","window":"5m"}`)
			send(t, s, `{"type":"subscribe","view":"overview","window":"1m"}`)
		}
		r := tm.mustDial().reading(t)
		send(t, r, `{"type":"subscribe","view":"overview","window":"1m"}`)
		send(t, r, `{"type":"subscribe","view":"rooms","window":"1m"}`)
		done := make(chan int)
		var overview atomic.Int64 // messages in the newest overview r got
		go func() {
			n := 0
			for f := range r.frames {
				n++
				if f.View == "overview" {
					overview.Store(messages(f))
				}
			}
			done <- n
		}()
		const events = 20_000
		for i := range events {
			tm.publish("chat.x.y", fmt.Sprintf(`{"room":"room-%04d-with-a-long-name-to-make-views-big","user":"user-%d","text":"%d"}`, i%rooms, i%997, i))
			if i%2000 == 1999 {
				tm.nc.Flush()
				time.Sleep(50 * time.Millisecond) // traffic spread over many push intervals
			}
		}
		tm.waitReceived(base + events)
		wait.For(t, 20*time.Second, func() error { // the reading client has the views of all of it
			var want struct{ Messages int64 }
			tm.get("/api/v1/overview?window=1m", &want)
			if got := overview.Load(); got != want.Messages {
				return fmt.Errorf("the reading client's overview counts %d messages, the API's %d", got, want.Messages)
			}
			return nil
		})
		r.Close()
		frames = <-done
		if s != nil {
			s.Close()
		}
		return frames
	}
	withStuck := phase(true, 0)
	withoutStuck := phase(false, 20_000)
	t.Logf("frames to the reading client: %d with a stuck client, %d without", withStuck, withoutStuck)
	if got := tm.metric("chatpulse_events_accepted_total"); got != 40_000 {
		t.Fatalf("accepted %v of 40000", got)
	}
	if d := tm.metric("chatpulse_events_dropped_total"); d != 0 {
		t.Fatalf("ingest dropped %v messages", d)
	}
	if withStuck < 10 {
		t.Fatalf("the reading client got %d frames beside a stuck client", withStuck)
	}
}

// Dashboards that subscribe to alerts get them, coalesced into the push,
// and the others get none; one client flooding the server with frames is
// refused without hurting another.
func TestWebsocketAlertsAndFlood(t *testing.T) {
	tm := startMain(t, "--push-interval", "100ms")
	a := tm.mustDial().reading(t)
	quiet := tm.mustDial().reading(t)
	send(t, a, `{"type":"subscribe","view":"alerts"}`)
	for _, c := range []*wsClient{a, quiet} {
		// The hub serves a client's frames in order: once the view is
		// here, so is the subscription to alerts.
		send(t, c, `{"type":"subscribe","view":"overview"}`)
		if f, ok := next(t, c, 5*time.Second); !ok || f.Type != "view" {
			t.Fatalf("first frame: %+v", f)
		}
	}

	flood := tm.mustDial().reading(t)
	go func() {
		for i := range 5000 {
			if flood.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf(`{"type":"subscribe","view":"room","room":"r%d"}`, i))) != nil {
				return
			}
		}
	}()
	limited := false
	for !limited {
		f, ok := next(t, flood, 10*time.Second)
		if !ok {
			t.Fatal("the flooding client got no error frame")
		}
		limited = f.Type == "error" && strings.Contains(f.Error, "too many requests")
	}

	// 11 messages from alice: one alert. Then 11 from each of 60 others in
	// one burst: more alerts than a frame holds if they come in one push.
	for i := range 11 {
		tm.publish("chat.lobby.alice", fmt.Sprintf(`{"room":"lobby","user":"alice","text":"%d"}`, i))
	}
	type alert struct {
		Policy, Room, User string
		Count, Limit       int
	}
	var first alert
	for views := 0; first.User == ""; {
		f, ok := next(t, a, 10*time.Second)
		if !ok {
			t.Fatalf("no alerts frame (%d views meanwhile)", views)
		}
		if f.Type == "view" {
			views++
			continue
		}
		var alerts []alert
		if f.Type != "alerts" || json.Unmarshal(f.Data, &alerts) != nil || len(alerts) != 1 || f.Omitted != 0 {
			t.Fatalf("frame %+v", f)
		}
		first = alerts[0]
	}
	if first.Policy != "user_room_flood" || first.Room != "lobby" || first.User != "alice" || first.Count != 11 || first.Limit != 10 {
		t.Fatalf("alert: %+v", first)
	}
	const others = 60
	for u := range others {
		for i := range 11 {
			tm.publish("chat.lobby.x", fmt.Sprintf(`{"room":"lobby","user":"u%d","text":"%d"}`, u, i))
		}
	}
	tm.nc.Flush()
	users := map[string]bool{}
	seen := 0
	for seen < others {
		f, ok := next(t, a, 10*time.Second)
		if !ok {
			t.Fatalf("%d of %d alerts delivered or omitted", seen, others)
		}
		if f.Type != "alerts" {
			continue
		}
		var alerts []alert
		json.Unmarshal(f.Data, &alerts)
		if len(alerts) > 50 {
			t.Fatalf("%d alerts in one frame", len(alerts))
		}
		for _, al := range alerts {
			if users[al.User] || al.User == "alice" {
				t.Fatalf("%s's alert again", al.User)
			}
			users[al.User] = true
		}
		seen += len(alerts) + f.Omitted
	}
	if seen != others || len(users) == 0 {
		t.Fatalf("%d alerts delivered, %d delivered or omitted, of %d", len(users), seen, others)
	}
	quiet.Close()
	for f := range quiet.frames {
		if f.Type == "alerts" {
			t.Fatal("alerts to a client that did not subscribe to them")
		}
	}
}
