package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/chatpulse/chatpulse/throttle"
)

// The views the hub pushes (contract section 4): what names one, how the
// server renders one, and the frames that go over the websocket.

type viewKind string

const (
	viewOverview viewKind = "overview"
	viewRoom     viewKind = "room"
	viewRooms    viewKind = "rooms" // the rooms list, an addition to the contract's two views
)

// viewKey names one pushed view; window is always a configured name.
type viewKey struct {
	kind   viewKind
	window string
	room   string
}

// clientMsg is a frame from the browser.
type clientMsg struct {
	Type   string   `json:"type"`
	View   viewKind `json:"view"`
	Window string   `json:"window"`
	Room   string   `json:"room"`
}

// key validates a subscription against the configured windows and names it
// canonically.
func (m clientMsg) key(windows []string) (viewKey, error) {
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
		if err := checkName("room", m.Room); err != nil {
			return k, err
		}
		k.room = m.Room
	default:
		return k, fmt.Errorf("view must be overview, room or rooms, got %q", m.View)
	}
	return k, nil
}

// render computes a view for the hub: its JSON, and the same without as_of
// to tell whether anything but the time changed. k is valid; pushed views
// list the default number of top users and rooms, and up to maxLimit rooms.
func (s *Server) render(k viewKey) (data, stamp []byte, err error) {
	now := s.nowMs()
	var v any
	switch k.kind {
	case viewOverview:
		v, err = s.views.Overview(k.window, defaultK, now)
	case viewRoom:
		v, err = s.views.Room(k.room, k.window, defaultK, now)
	case viewRooms:
		v, err = s.views.Rooms(k.window, maxLimit, now)
	}
	if err != nil {
		return nil, nil, err
	}
	if data, err = json.Marshal(v); err != nil {
		return nil, nil, err
	}
	return data, withoutAsOf(data), nil
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

func alertFrame(a throttle.Alert) []byte {
	b, _ := json.Marshal(struct {
		Type string         `json:"type"`
		Data throttle.Alert `json:"data"`
	}{"alert", a})
	return b
}

func errorFrame(msg string) []byte {
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error string `json:"error"`
	}{"error", msg})
	return b
}
