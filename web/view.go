package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/chatpulse/chatpulse/aggregator"
)

// The views the hub pushes (docs/contract.md section 4): what names one, how the
// server renders one, and the frames that go over the websocket.

type viewKind = aggregator.View

const (
	viewOverview          = aggregator.ViewOverview
	viewRoom              = aggregator.ViewRoom
	viewRooms             = aggregator.ViewRooms // the rooms list, an addition to the contract's two views
	viewAlerts   viewKind = "alerts"             // throttle alerts, coalesced (feed.go)
	viewActs     viewKind = "acts"               // acts on the chat system and their undos, coalesced (feed.go)
)

// viewKey names one pushed view; window is always a configured name.
type viewKey struct {
	kind   viewKind
	window string
	room   string
}

// feed reports whether k is a feed's view (feed.go), which takes no
// window and no room.
func (k viewKey) feed() bool { return k.kind == viewAlerts || k.kind == viewActs }

// clientMsg is a frame from the browser.
type clientMsg struct {
	Type   string
	View   viewKind
	Window string
	Room   string
}

// key validates a subscription against the configured windows and names it
// canonically.
func (m clientMsg) key(windows []string, maxName int) (viewKey, error) {
	if k := (viewKey{kind: m.View}); k.feed() {
		if m.Window != "" || m.Room != "" {
			return viewKey{}, fmt.Errorf("view %s takes no window and no room", m.View)
		}
		return k, nil
	}
	win, err := windowName(m.Window, windows)
	if err != nil {
		return viewKey{}, err
	}
	k := viewKey{kind: m.View, window: win}
	switch m.View {
	case viewOverview, viewRooms:
		if m.Room != "" {
			return k, fmt.Errorf("view %s takes no room", m.View)
		}
	case viewRoom:
		if err := checkName("room", m.Room, maxName); err != nil {
			return k, err
		}
		k.room = m.Room
	default:
		return k, fmt.Errorf("view must be overview, room, rooms, alerts or acts, got %q", m.View)
	}
	return k, nil
}

// RoomActivity is optional for Views. A Views that has it lets the hub
// skip the room views that cannot have changed: a room without messages,
// joins or leaves (one nobody talks in or joins, or that does not exist)
// answers the empty view of docs/contract.md section 3, zeros and nulls,
// until one comes, so once the
// hub has pushed that view it need not compute it again while the room
// stays inactive. Without it, every watched view is computed every push.
type RoomActivity interface {
	// RoomActive reports whether room may have messages, joins or leaves
	// in some window. It must never answer false for a room with any;
	// answering true for one whose last ones just left is fine.
	RoomActive(room string) bool
}

// render computes a view for the hub (a renderFunc). k is valid; pushed
// views list the default number of top users and rooms, and up to maxLimit
// rooms.
func (s *Server) render(k viewKey, last rendering) (rendering, error) {
	now := s.nowMs()
	var (
		v     any
		err   error
		quiet bool
	)
	switch k.kind {
	case viewOverview:
		v, err = s.views.Overview(k.window, defaultK, now)
	case viewRoom:
		activity, ok := s.views.(RoomActivity)
		if ok && last.quiet && !activity.RoomActive(k.room) {
			return rendering{quiet: true}, nil // still the empty view
		}
		var r aggregator.Room
		r, err = s.views.Room(k.room, k.window, defaultK, now)
		v, quiet = r, ok && r.Messages == 0 && r.Joins == 0 && r.Leaves == 0
	case viewRooms:
		v, err = s.views.Rooms(k.window, maxLimit, now)
	}
	if err != nil {
		return rendering{}, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return rendering{}, err
	}
	return rendering{frame: viewFrame(k, data), stamp: withoutAsOf(data), quiet: quiet}, nil
}

// withoutAsOf blanks the as_of value of a view's JSON.
func withoutAsOf(data []byte) []byte {
	const field = `"as_of":"`
	i := bytes.Index(data, []byte(field))
	if i < 0 {
		return data
	}
	j := bytes.IndexByte(data[i+len(field):], '"')
	if j < 0 {
		return data
	}
	return slices.Concat(data[:i+len(field)], data[i+len(field)+j:])
}

func viewFrame(k viewKey, data []byte) []byte {
	head, _ := json.Marshal(struct {
		Type   string   `json:"type"`
		View   viewKind `json:"view"`
		Window string   `json:"window"`
		Room   string   `json:"room"`
	}{"view", k.kind, k.window, k.room})
	return slices.Concat(head[:len(head)-1], []byte(`,"data":`), data, []byte("}"))
}

func errorFrame(msg string) []byte {
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error string `json:"error"`
	}{"error", msg})
	return b
}
