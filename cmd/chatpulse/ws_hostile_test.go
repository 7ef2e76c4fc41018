package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatpulse/chatpulse/internal/wait"
)

// Connections each watching as many nonexistent rooms as they may cannot
// take the hub: the distinct room views are bounded and the subscriptions
// past the bound get an error frame saying so, a fresh dashboard gets its
// first view while they are connected and while they all leave at once,
// and once they are gone so are their views. (Scaled down from chatbench
// stall's 3,000 connections; docs/performance.md has those figures.)
func TestWebsocketHostileRooms(t *testing.T) {
	tm := startMain(t, "--jetstream=false")
	const (
		hostile  = 300
		rooms    = 64     // each, the per-connection limit
		maxViews = 10_000 // the hub's bound on distinct room views
	)
	type answers struct{ views, refused int }
	done := make(chan answers, hostile)
	conns := make([]*websocket.Conn, hostile)
	for i := range conns {
		c, _, err := tm.dial(tm.url)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		go func() {
			var a answers
			defer func() { done <- a }()
			start := time.Now()
			for j := range rooms {
				// One at a time, and past the burst of 40 no faster than
				// the limit of 20 a second, so none is refused for its rate.
				time.Sleep(time.Until(start.Add(time.Duration(max(0, j-36)) * 60 * time.Millisecond)))
				if c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"type":"subscribe","view":"room","room":"nx-%d-%d"}`, i, j)) != nil {
					return
				}
				_, b, err := c.ReadMessage()
				if err != nil {
					return
				}
				var f frame
				json.Unmarshal(b, &f)
				switch {
				case f.Type == "view" && f.View == "room":
					a.views++
				case f.Type == "error" && strings.Contains(f.Error, fmt.Sprintf("already pushes %d room views", maxViews)):
					a.refused++
				default:
					t.Errorf("unexpected frame %s", b)
				}
			}
		}()
	}
	var total answers
	for range hostile {
		select {
		case a := <-done:
			total.views += a.views
			total.refused += a.refused
		case <-time.After(60 * time.Second):
			t.Fatalf("subscriptions unanswered after a minute: %+v so far", total)
		}
	}
	if total.views != maxViews || total.refused != hostile*rooms-maxViews {
		t.Fatalf("%d room views given and %d refused, want %d and %d", total.views, total.refused, maxViews, hostile*rooms-maxViews)
	}
	if v := tm.metric("chatpulse_ws_views"); v != maxViews {
		t.Fatalf("chatpulse_ws_views %v, want %d", v, maxViews)
	}

	dashboard := func(what string) *wsClient {
		c := tm.mustDial().reading(t)
		send(t, c, `{"type":"subscribe","view":"overview"}`)
		send(t, c, `{"type":"subscribe","view":"rooms"}`)
		f, ok := next(t, c, 20*time.Second)
		if !ok || f.Type != "view" {
			t.Fatalf("a fresh dashboard %s: first frame %+v", what, f)
		}
		return c
	}
	dashboard("beside the hostile connections").Close()
	for _, c := range conns {
		c.Close()
	}
	fresh := dashboard("while the hostile connections leave")
	wait.For(t, 20*time.Second, func() error {
		if clients, views := tm.metric("chatpulse_ws_clients"), tm.metric("chatpulse_ws_views"); clients != 1 || views != 2 {
			return fmt.Errorf("%v websocket clients watching %v views, want the fresh one and its 2", clients, views)
		}
		return nil
	})
	send(t, fresh, `{"type":"subscribe","view":"room","room":"lobby"}`)
	for {
		f, ok := next(t, fresh, 20*time.Second)
		if !ok || f.Type == "error" {
			t.Fatalf("a room view after the hostile ones left: %+v", f)
		}
		if f.View == "room" {
			break
		}
	}
}
