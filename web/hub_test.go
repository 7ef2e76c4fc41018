package web

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// countingViews is an aggregator that counts the views read from it. It
// embeds Views, not the aggregator, so it has no RoomActivity of its own.
type countingViews struct {
	Views
	agg              *aggregator.Aggregator
	rooms, overviews atomic.Int64
}

func newCountingViews(agg *aggregator.Aggregator) *countingViews {
	return &countingViews{Views: agg, agg: agg}
}

func (v *countingViews) Room(name, win string, k int, now int64) (aggregator.Room, error) {
	v.rooms.Add(1)
	return v.agg.Room(name, win, k, now)
}

func (v *countingViews) Overview(win string, k int, now int64) (aggregator.Overview, error) {
	v.overviews.Add(1)
	return v.agg.Overview(win, k, now)
}

// activeViews adds RoomActivity to countingViews, answered exactly (and
// slowly) from the aggregator's own room views.
type activeViews struct{ *countingViews }

func (v activeViews) RoomActive(room string) bool {
	for _, w := range v.WindowNames() {
		if r, _ := v.agg.Room(room, w, 1, testNow.UnixMilli()); r.Messages > 0 || r.Joins > 0 || r.Leaves > 0 {
			return true
		}
	}
	return false
}

var testNow = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)

// testHub serves views over a websocket hub pushing every 10ms, with the
// clock stopped at testNow; it returns the websocket URL.
func testHub(t *testing.T, views Views) string {
	t.Helper()
	s := New(views, nil, Options{Now: func() time.Time { return testNow }, PushInterval: 10 * time.Millisecond})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { s.Run(stop); close(done) }()
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); close(stop); <-done })
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
}

func newAggregator(t testing.TB) *aggregator.Aggregator {
	t.Helper()
	ws, err := rolling.ParseWindows("1m,5m,1h")
	if err != nil {
		t.Fatal(err)
	}
	a, err := aggregator.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

type testFrame struct {
	Type, View, Window, Room, Error string
	Data                            json.RawMessage
	Omitted                         int64
}

// testClient dials url and reads its frames into a channel.
func testClient(t *testing.T, url string) (*websocket.Conn, <-chan testFrame) {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	frames := make(chan testFrame, 4096)
	go func() {
		defer close(frames)
		for {
			_, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			var f testFrame
			if err := json.Unmarshal(b, &f); err != nil {
				t.Errorf("frame %s: %v", b, err)
				return
			}
			frames <- f
		}
	}()
	return c, frames
}

func sendFrame(t *testing.T, c *websocket.Conn, format string, args ...any) {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, format, args...)); err != nil {
		t.Fatal(err)
	}
}

// waitFrame returns the first frame that match accepts, failing after 10s.
func waitFrame(t *testing.T, frames <-chan testFrame, what string, match func(testFrame) bool) testFrame {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("%s: connection closed", what)
			}
			if match(f) {
				return f
			}
		case <-deadline:
			t.Fatalf("%s: no such frame in 10s", what)
		}
	}
}

// A room view with no messages is computed once, not every push, when the
// Views can tell that the room is still without messages; without that it
// is computed every push. Either way its first message is pushed, and a
// quiet room's first join (docs/contract.md section 12).
func TestHubSkipsQuietRooms(t *testing.T) {
	const rooms = 30
	for _, withActivity := range []bool{true, false} {
		t.Run(fmt.Sprintf("RoomActivity=%v", withActivity), func(t *testing.T) {
			agg := newAggregator(t)
			counted := newCountingViews(agg)
			var views Views = counted
			if withActivity {
				views = activeViews{counted}
			}
			c, frames := testClient(t, testHub(t, views))
			sendFrame(t, c, `{"type":"subscribe","view":"overview"}`)
			for i := range rooms {
				sendFrame(t, c, `{"type":"subscribe","view":"room","room":"q-%d"}`, i)
			}
			seen := map[string]bool{}
			for len(seen) < rooms {
				f := waitFrame(t, frames, "first room views", func(f testFrame) bool { return f.View == "room" })
				seen[f.Room] = true
			}
			before, pushes := counted.rooms.Load(), counted.overviews.Load()
			wait.For(t, 10*time.Second, func() error {
				if n := counted.overviews.Load() - pushes; n < 10 {
					return fmt.Errorf("%d of ten pushes since the rooms' first views", n)
				}
				return nil
			})
			computed := counted.rooms.Load() - before
			if withActivity && computed != 0 {
				t.Errorf("quiet room views computed %d times in ten pushes", computed)
			}
			if !withActivity && computed < 9*rooms {
				t.Errorf("room views computed %d times in ten pushes, want every push without RoomActivity", computed)
			}
			agg.Observe(testNow.UnixMilli(), []chat.Event{{Room: "q-7", User: "alice", TS: testNow.UnixMilli()}}, nil)
			f := waitFrame(t, frames, "q-7's first message", func(f testFrame) bool { return f.Room == "q-7" })
			var v aggregator.Room
			json.Unmarshal(f.Data, &v)
			if v.Messages != 1 || v.TopTalker == nil || v.TopTalker.User != "alice" {
				t.Fatalf("q-7 after its first message: %s", f.Data)
			}
			agg.Observe(testNow.UnixMilli(), []chat.Event{{Room: "q-9", User: "bob", TS: testNow.UnixMilli(), Kind: chat.KindJoin}}, nil)
			f = waitFrame(t, frames, "q-9's first join", func(f testFrame) bool { return f.Room == "q-9" })
			v = aggregator.Room{}
			json.Unmarshal(f.Data, &v)
			if v.Messages != 0 || v.Joins != 1 || v.TopTalker != nil {
				t.Fatalf("q-9 after its first join: %s", f.Data)
			}
		})
	}
}

// While counts grow, clients subscribing and unsubscribing over and over
// (new views' first versions racing pushes) never get an older version of
// a view after a newer one.
func TestHubNeverOlder(t *testing.T) {
	agg := newAggregator(t)
	url := testHub(t, agg)
	stop := make(chan struct{})
	var feeding sync.WaitGroup
	feeding.Go(func() {
		now := testNow.UnixMilli()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			agg.Observe(now, []chat.Event{{Room: "lobby", User: fmt.Sprint("u", i%50), TS: now}}, nil)
			time.Sleep(50 * time.Microsecond) // pace: counts grow through every push
		}
	})
	var clients sync.WaitGroup
	for range 6 {
		c, frames := testClient(t, url)
		clients.Go(func() {
			for i := range 30 { // 60 frames at 20 a second: within the limit
				op := "subscribe"
				if i%2 == 1 {
					op = "unsubscribe"
				}
				sendFrame(t, c, `{"type":"%s","view":"room","room":"lobby"}`, op)
				sendFrame(t, c, `{"type":"subscribe","view":"overview"}`)
				time.Sleep(100 * time.Millisecond) // pace: under the frame limit, over many pushes
			}
			c.Close()
		})
		clients.Go(func() {
			last := map[string]int64{}
			n := 0
			for f := range frames {
				if f.Type == "error" {
					t.Errorf("error frame: %s", f.Error)
				}
				var v struct{ Messages int64 }
				json.Unmarshal(f.Data, &v)
				if v.Messages < last[f.View] {
					t.Errorf("%s view with %d messages after one with %d", f.View, v.Messages, last[f.View])
				}
				last[f.View] = v.Messages
				n++
			}
			if n < 10 {
				t.Errorf("a client got %d frames", n)
			}
		})
	}
	clients.Wait()
	close(stop)
	feeding.Wait()
}

// Each feed (alerts, acts) goes, coalesced, only to the clients that
// subscribed to it, and every item is in a frame or counted as omitted.
func TestHubFeeds(t *testing.T) {
	for _, tc := range []struct {
		view string
		send func(s *Server, user string)
	}{
		{"alerts", func(s *Server, user string) {
			s.Alert(throttle.Alert{Policy: "user_flood", User: user, Count: 31, Limit: 30, At: chat.Time(testNow.UnixMilli())})
		}},
		{"acts", func(s *Server, user string) {
			s.Acted(fmt.Appendf(nil, `{"kind":"redact","room":"lobby","user":%q,"policy":"user_flood","at":"2026-11-30T07:00:00.000Z"}`, user))
		}},
	} {
		t.Run(tc.view, func(t *testing.T) { testHubFeed(t, tc.view, tc.send) })
	}
}

func testHubFeed(t *testing.T, view string, send func(s *Server, user string)) {
	s := New(newAggregator(t), nil, Options{Now: func() time.Time { return testNow }, PushInterval: 10 * time.Millisecond})
	stop := make(chan struct{})
	defer close(stop)
	go s.Run(stop)
	srv := httptest.NewServer(s)
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"

	sub, subFrames := testClient(t, url)
	other, otherFrames := testClient(t, url)
	for _, c := range []*websocket.Conn{sub, other} {
		sendFrame(t, c, `{"type":"subscribe","view":"overview"}`)
	}
	sendFrame(t, sub, `{"type":"subscribe","view":%q}`, view)
	sendFrame(t, other, `{"type":"subscribe","view":%q}`, otherFeed(view))
	for _, frames := range []<-chan testFrame{subFrames, otherFrames} { // the hub has the subscriptions
		waitFrame(t, frames, "overview", func(f testFrame) bool { return f.View == "overview" })
	}
	sendFrame(t, sub, `{"type":"subscribe","view":%q,"window":"1m"}`, view)
	if f := waitFrame(t, subFrames, "error", func(f testFrame) bool { return f.Type == "error" }); f.Error != "view "+view+" takes no window and no room" {
		t.Fatalf("error %q", f.Error)
	}

	const total = 1000
	for i := range total {
		send(s, fmt.Sprint("u", i))
		if i%100 == 99 {
			time.Sleep(20 * time.Millisecond) // pace: the items spread over pushes, so over several frames
		}
	}
	got, users := int64(0), map[string]bool{}
	for got < total {
		f := waitFrame(t, subFrames, view, func(f testFrame) bool { return f.Type == view })
		var items []struct{ User string }
		if err := json.Unmarshal(f.Data, &items); err != nil {
			t.Fatal(err)
		}
		if len(items) > maxPerFrame || len(items)+int(f.Omitted) == 0 {
			t.Fatalf("a frame with %d items and %d omitted", len(items), f.Omitted)
		}
		for _, a := range items {
			if users[a.User] {
				t.Fatalf("%s's item twice", a.User)
			}
			users[a.User] = true
		}
		got += int64(len(items)) + f.Omitted
	}
	if got != total {
		t.Fatalf("%d items sent, %d delivered or omitted", total, got)
	}
	if len(users) < maxPerFrame {
		t.Fatalf("only %d items delivered", len(users))
	}
	other.Close()
	for f := range otherFrames {
		if f.Type == view {
			t.Fatalf("%s to a client that did not subscribe to them", view)
		}
	}
}

// otherFeed is the feed that is not view.
func otherFeed(view string) string {
	if view == "alerts" {
		return "acts"
	}
	return "alerts"
}

func TestFeedTake(t *testing.T) {
	for _, n := range []int{0, 1, maxPerFrame, maxPerFrame + 1, 2 * maxPerFrame, 2*maxPerFrame + 1, 1234} {
		p := newFeed[json.RawMessage](feedActs)
		for i := range n {
			p.add(json.RawMessage(fmt.Sprintf(`{"user":"%d"}`, i)))
		}
		p.missed.Add(7)
		f := p.take()
		var got struct {
			Type    string
			Data    []struct{ User string }
			Omitted int64
		}
		json.Unmarshal(f.frame, &got)
		kept := min(n, maxPerFrame)
		if got.Type != "acts" || len(got.Data) != kept || got.Omitted != int64(n-kept+7) || f.n != int64(n+7) || f.kind != feedActs {
			t.Fatalf("%d items: %s", n, f.frame)
		}
		for i, a := range got.Data { // the newest, oldest first
			if a.User != fmt.Sprint(n-kept+i) {
				t.Fatalf("%d items: %s", n, f.frame)
			}
		}
		if f := p.take(); f.frame != nil {
			t.Fatalf("after take: %s", f.frame)
		}
	}
}

// FuzzParseFrame: any frame from a browser is refused with an error or
// names a view that can be served: a known kind, a configured window, and a
// room, valid, exactly when the view is a room's.
func FuzzParseFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"subscribe","view":"overview","window":"1m"}`,
		`{"type":"unsubscribe","view":"room","room":"lobby"}`,
		`{"type":"subscribe","view":"rooms","window":"1h"}`,
		`{"type":"subscribe","view":"alerts"}`,
		`{"type":"subscribe","view":"room","room":"\ud800"}`,
		`{"type":"subscribe","view":"alerts","window":"1m"}`,
		`{"type":"subscribe","view":"acts"}`,
		`{"type":"unsubscribe","view":"acts","room":"x"}`,
		`{"type":"subscribe","view":"overview","room":"x"}`,
		`{"type":"subscribe","view":"overview"} {}`,
		`not json`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	windows := []string{"1m", "5m", "1h"}
	f.Fuzz(func(t *testing.T, data []byte) {
		op, k, err := parseFrame(data, windows, chat.MaxNameLen)
		if err != nil {
			return
		}
		if op != subscribe && op != unsubscribe {
			t.Fatalf("%q: op %v", data, op)
		}
		switch k.kind {
		case viewAlerts, viewActs:
			if k.window != "" || k.room != "" {
				t.Fatalf("%q: %+v", data, k)
			}
			return
		case viewOverview, viewRooms:
			if k.room != "" {
				t.Fatalf("%q: %+v", data, k)
			}
		case viewRoom:
			if chat.CheckName("room", k.room) != nil {
				t.Fatalf("%q: room %q", data, k.room)
			}
		default:
			t.Fatalf("%q: kind %q", data, k.kind)
		}
		if !slices.Contains(windows, k.window) {
			t.Fatalf("%q: window %q", data, k.window)
		}
	})
}
