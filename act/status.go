package act

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/chatpulse/chatpulse/chat"
)

// Status is GET /api/v1/act (docs/contract.md section 14): the mode, what
// the bot can do in each room where it had to act, the queue, what it
// dropped, and the undos due.
type Status struct {
	Mode    string       `json:"mode"`
	Rooms   []RoomStatus `json:"rooms"`
	Queue   int          `json:"queue"`
	Dropped uint64       `json:"dropped"`
	Pending []Pending    `json:"pending"`
}

// RoomStatus is what the bot can do in one room: can_act once it lacks
// nothing.
type RoomStatus struct {
	Room    string   `json:"room"`
	CanAct  bool     `json:"can_act"`
	Missing []string `json:"missing"`
}

// Pending is an undo due.
type Pending struct {
	Kind Kind       `json:"kind"` // unmute or unlock
	Room string     `json:"room"`
	User string     `json:"user,omitempty"`
	Due  *chat.Time `json:"due"` // null: when a moderator's timeout is lifted
}

// Status says what the Actor is doing.
func (a *Actor) Status() Status {
	n, dropped := a.q.waiting()
	s := Status{Mode: a.cfg.Mode, Queue: n, Rooms: []RoomStatus{}, Pending: []Pending{}}
	for _, d := range dropped {
		s.Dropped += d
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, r := range a.rooms {
		s.Rooms = append(s.Rooms, RoomStatus{Room: name, CanAct: len(r.missing) == 0, Missing: append([]string{}, r.missing...)})
	}
	for _, r := range a.recs {
		if r.state == pending {
			continue
		}
		kind := Unmute
		if r.Kind == Lock {
			kind = Unlock
		}
		p := Pending{Kind: kind, Room: r.Room, User: r.User}
		if r.Due != 0 {
			due := chat.Time(r.Due)
			p.Due = &due
		}
		s.Pending = append(s.Pending, p)
	}
	slices.SortFunc(s.Rooms, func(x, y RoomStatus) int { return strings.Compare(x.Room, y.Room) })
	slices.SortFunc(s.Pending, func(x, y Pending) int {
		return cmp.Or(cmp.Compare(dueOf(x), dueOf(y)), strings.Compare(x.Room, y.Room), strings.Compare(x.User, y.User))
	})
	return s
}

// withoutPower is how many rooms where the bot had to act lack a power.
func (a *Actor) withoutPower() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.rooms {
		if len(r.missing) > 0 {
			n++
		}
	}
	return n
}

// dueOf orders the undos: those until lifted last.
func dueOf(p Pending) int64 {
	if p.Due == nil {
		return math.MaxInt64
	}
	return int64(*p.Due)
}
