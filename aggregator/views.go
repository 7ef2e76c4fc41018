package aggregator

import "github.com/chatpulse/chatpulse/chat"

// The views, shaped exactly as the contract's JSON (section 3).

// A View names a view, as the HTTP API, the websocket, the bus's endpoints
// (chatpulse.views.<view>) and a group's members all call it.
type View string

// The views, each a type below.
const (
	ViewWindows  View = "windows"
	ViewOverview View = "overview"
	ViewRooms    View = "rooms"
	ViewRoom     View = "room"
	ViewUser     View = "user"
)

// Views lists every view.
var Views = []View{ViewWindows, ViewOverview, ViewRooms, ViewRoom, ViewUser}

// Talker is a user and its messages in a window.
type Talker struct {
	User     string `json:"user"`
	Messages int64  `json:"messages"`
}

// RoomCount is a room and its messages in a window.
type RoomCount struct {
	Room     string `json:"room"`
	Messages int64  `json:"messages"`
}

// WindowInfo describes one configured window.
type WindowInfo struct {
	Name              string  `json:"name"`
	Seconds           float64 `json:"seconds"`
	ResolutionSeconds float64 `json:"resolution_seconds"`
}

// Windows is GET /api/v1/windows.
type Windows struct {
	Windows []WindowInfo `json:"windows"`
}

// Overview is GET /api/v1/overview.
type Overview struct {
	Window         string      `json:"window"`
	AsOf           chat.Time   `json:"as_of"`
	Messages       int64       `json:"messages"`
	Rate           float64     `json:"rate"`
	DistinctUsers  int         `json:"distinct_users"`
	ActiveRooms    int         `json:"active_rooms"`
	TopTalker      *Talker     `json:"top_talker"`
	TopUsers       []Talker    `json:"top_users"`
	TopRooms       []RoomCount `json:"top_rooms"`
	Series         []int64     `json:"series"`
	Joins          int64       `json:"joins"`        // docs/contract.md section 12
	Leaves         int64       `json:"leaves"`       // docs/contract.md section 12
	SeriesJoins    []int64     `json:"series_joins"` // per bucket, as Series
	*chat.Coverage             // only views merged from a group carry it
}

// RoomSummary is one row of the rooms list.
type RoomSummary struct {
	Room          string  `json:"room"`
	Messages      int64   `json:"messages"`
	Rate          float64 `json:"rate"`
	DistinctUsers int     `json:"distinct_users"`
	TopTalker     *Talker `json:"top_talker"`
}

// Rooms is GET /api/v1/rooms: active rooms, busiest first.
type Rooms struct {
	Window         string        `json:"window"`
	AsOf           chat.Time     `json:"as_of"`
	Rooms          []RoomSummary `json:"rooms"`
	*chat.Coverage               // only views merged from a group carry it
}

// Room is GET /api/v1/rooms/{room}.
type Room struct {
	Room           string    `json:"room"`
	Window         string    `json:"window"`
	AsOf           chat.Time `json:"as_of"`
	Messages       int64     `json:"messages"`
	Rate           float64   `json:"rate"`
	DistinctUsers  int       `json:"distinct_users"`
	TopTalker      *Talker   `json:"top_talker"`
	TopUsers       []Talker  `json:"top_users"`
	Series         []int64   `json:"series"`
	Joins          int64     `json:"joins"`        // docs/contract.md section 12
	Leaves         int64     `json:"leaves"`       // docs/contract.md section 12
	SeriesJoins    []int64   `json:"series_joins"` // per bucket, as Series
	*chat.Coverage           // only views merged from a group carry it
}

// User is GET /api/v1/users/{user}.
type User struct {
	User           string      `json:"user"`
	Window         string      `json:"window"`
	AsOf           chat.Time   `json:"as_of"`
	Messages       int64       `json:"messages"`
	Rooms          []RoomCount `json:"rooms"`
	*chat.Coverage             // only views merged from a group carry it
}

// topTalker is the first of the top users, or nil.
func topTalker(ts []Talker) *Talker {
	if len(ts) == 0 {
		return nil
	}
	t := ts[0]
	return &t
}
