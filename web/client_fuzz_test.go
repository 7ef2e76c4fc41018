package web

import (
	"bytes"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/chatpulse/chatpulse/chat"
)

// FuzzClientFrames feeds a websocket client's frame parser (client.handle)
// any sequence of frames, one per line of the input. Whatever comes, it
// must not panic, must hand the hub only valid subscriptions (a configured
// window, a known view, a room that is a valid name exactly when the view
// is a room), keep a client's subscriptions within maxSubscriptions,
// unsubscribe only what it subscribed, and answer a bad frame with an
// error fit for an error frame.
func FuzzClientFrames(f *testing.F) {
	for _, s := range []string{
		`{"type":"subscribe","view":"overview","window":"1m"}`,
		`{"type":"subscribe","view":"room","room":"lobby","window":"5m"}` + "\n" + `{"type":"unsubscribe","view":"room","room":"lobby","window":"5m"}`,
		`{"type":"subscribe","view":"rooms"}`,
		`{"type":"subscribe","view":"room","room":"\ud800","window":"1m"}`,
		`{"TYPE":"subscribe","View":"overview"}`,
		`{"type":"subscribe","view":"overview","room":"x"}`,
		`{"type":"subscribe","view":"room","room":"` + string(bytes.Repeat([]byte("r"), 129)) + `"}`,
		`{"type":"ping"}`, `[]`, `null`, `{"type":"subscribe","extra":1}`, "{\"type\":\"subscribe\",\"view\":\"room\",\"room\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	windows := []string{"1m", "5m", "1h"}
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHub(hubConfig{windows: func() []string { return windows }})
		c := &client{hub: h, subs: map[viewKey]bool{}}
		subscribed := map[viewKey]bool{}
		for frame := range bytes.SplitSeq(data, []byte("\n")) {
			err := c.handle(frame)
			if err != nil && !utf8.ValidString(err.Error()) {
				t.Fatalf("frame %q: error %q is not UTF-8", frame, err)
			}
			if len(c.subs) > maxSubscriptions {
				t.Fatalf("%d subscriptions", len(c.subs))
			}
			select {
			case r := <-h.requests:
				if err != nil {
					t.Fatalf("frame %q: refused (%v), yet asked the hub %+v", frame, err, r)
				}
				k := r.key
				if !slices.Contains(windows, k.window) {
					t.Fatalf("frame %q: window %q", frame, k.window)
				}
				switch k.kind {
				case viewOverview, viewRooms:
					if k.room != "" {
						t.Fatalf("frame %q: %s with room %q", frame, k.kind, k.room)
					}
				case viewRoom:
					if chat.CheckName("room", k.room) != nil {
						t.Fatalf("frame %q: room %q", frame, k.room)
					}
				default:
					t.Fatalf("frame %q: view %q", frame, k.kind)
				}
				switch r.op {
				case subscribe:
					subscribed[k] = true
				case unsubscribe:
					if !subscribed[k] {
						t.Fatalf("frame %q: unsubscribed %+v, never subscribed", frame, k)
					}
					delete(subscribed, k)
				default:
					t.Fatalf("frame %q: op %v", frame, r.op)
				}
			default:
			}
		}
	})
}
