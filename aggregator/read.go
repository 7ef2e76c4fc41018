package aggregator

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/topk"
)

// The reads: every view of docs/contract.md section 3, each under the lock and
// at the as_of T = max(now, newest accepted event time).

// window finds a window by name; "" is the first.
func (a *Aggregator) window(name string) (*window, error) {
	if name == "" {
		return a.ws[0], nil
	}
	for _, w := range a.ws {
		if w.Name == name {
			return w, nil
		}
	}
	return nil, fmt.Errorf("%w %q; configured: %s", ErrUnknownWindow, name, strings.Join(a.WindowNames(), ", "))
}

// WindowNames lists the configured windows, the default first.
func (a *Aggregator) WindowNames() []string {
	names := make([]string, len(a.ws))
	for i, w := range a.ws {
		names[i] = w.Name
	}
	return names
}

// Windows is the windows view.
func (a *Aggregator) Windows() Windows {
	v := Windows{Windows: make([]WindowInfo, len(a.ws))}
	for i, w := range a.ws {
		v.Windows[i] = WindowInfo{Name: w.Name, Seconds: w.Size.Seconds(), ResolutionSeconds: w.Res.Seconds()}
	}
	return v
}

// read brings the window named win up to date for a view at now, and
// returns it with the as_of T and its bucket. The caller holds the lock.
func (a *Aggregator) read(win string, now int64) (w *window, t, b int64, err error) {
	w, err = a.window(win)
	if err != nil {
		return nil, 0, 0, err
	}
	t = a.tick(now)
	b = w.bucket(t)
	w.advance(b)
	return w, t, b, nil
}

// The items of window i's rankings, for a heap that must rebuild (see
// topk.Heap.Top): every user, every room, and a room's talkers.

func (a *Aggregator) userItems(i int) iter.Seq[*topk.Item] {
	return func(yield func(*topk.Item) bool) {
		for _, u := range a.users {
			if !yield(&u.win(i).item) {
				return
			}
		}
	}
}

func (a *Aggregator) roomItems(i int) iter.Seq[*topk.Item] {
	return func(yield func(*topk.Item) bool) {
		for _, r := range a.rooms {
			if !yield(&r.w[i].item) {
				return
			}
		}
	}
}

func (r *room) talkerItems(i int) iter.Seq[*topk.Item] {
	return func(yield func(*topk.Item) bool) {
		for _, p := range r.pairs {
			if !yield(&p.win(i).item) {
				return
			}
		}
	}
}

func (w *window) rate(messages int64) float64 { return float64(messages) / w.Size.Seconds() }

// talkers are the users or a room's talkers that a ranking of keys gave.
func talkers(items []*topk.Item, keys topk.Keys) []Talker {
	out := make([]Talker, len(items))
	for i, it := range items {
		out[i] = Talker{User: keys.Name(it), Messages: keys.Count(it)}
	}
	return out
}

// Overview is the overview of a window, with its k top users and rooms.
func (a *Aggregator) Overview(win string, k int, now int64) (Overview, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, t, b, err := a.read(win, now)
	if err != nil {
		return Overview{}, err
	}
	var items [MaxK]*topk.Item
	v := Overview{
		Window:        w.Name,
		AsOf:          chat.Time(t),
		Messages:      w.total.Count(b),
		DistinctUsers: w.users,
		ActiveRooms:   w.rooms.Keys(),
		TopUsers:      talkers(w.topUsers.Top(k, items[:0], userKeys{w.i}, a.userItems(w.i)), userKeys{w.i}),
		Series:        w.total.Series(b, make([]int64, 0, w.n)),
		Joins:         w.joins.Count(b),
		Leaves:        w.leaves.Count(b),
		SeriesJoins:   w.joins.Series(b, make([]int64, 0, w.n)),
	}
	v.Rate = w.rate(v.Messages)
	v.TopTalker = topTalker(v.TopUsers)
	top := w.topRooms.Top(k, items[:0], roomKeys{}, a.roomItems(w.i))
	v.TopRooms = make([]RoomCount, len(top))
	for i, it := range top {
		rw := roomWinOf(it)
		v.TopRooms[i] = RoomCount{Room: rw.room.name, Messages: rw.tally.Count}
	}
	return v, nil
}

// Rooms lists up to limit active rooms of a window, busiest first.
func (a *Aggregator) Rooms(win string, limit int, now int64) (Rooms, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, t, _, err := a.read(win, now)
	if err != nil {
		return Rooms{}, err
	}
	top := w.topRooms.Top(limit, nil, roomKeys{}, a.roomItems(w.i))
	v := Rooms{Window: w.Name, AsOf: chat.Time(t), Rooms: make([]RoomSummary, len(top))}
	var one [1]*topk.Item
	for i, it := range top {
		rw := roomWinOf(it)
		r := rw.room
		s := RoomSummary{Room: r.name, Messages: rw.tally.Count, Rate: w.rate(rw.tally.Count), DistinctUsers: rw.distinct}
		if tt := rw.talkers.Top(1, one[:0], pairKeys{w.i}, r.talkerItems(w.i)); len(tt) > 0 {
			s.TopTalker = &talkers(tt, pairKeys{w.i})[0]
		}
		v.Rooms[i] = s
	}
	return v, nil
}

// Room is one room's view of a window; a room without messages in it
// answers zeros for them, and one without joins and leaves zeros for
// those.
func (a *Aggregator) Room(name, win string, k int, now int64) (Room, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, t, _, err := a.read(win, now)
	if err != nil {
		return Room{}, err
	}
	v := Room{Room: name, Window: w.Name, AsOf: chat.Time(t), TopUsers: []Talker{}}
	series := make([]int64, 0, w.n)
	if r := a.rooms[name]; r == nil || r.w[w.i].tally.Count == 0 {
		v.Series = append(series, make([]int64, w.n)...)
	} else {
		rw := &r.w[w.i]
		var items [MaxK]*topk.Item
		v.Messages = rw.tally.Count
		v.Rate = w.rate(v.Messages)
		v.DistinctUsers = rw.distinct
		v.TopUsers = talkers(rw.talkers.Top(k, items[:0], pairKeys{w.i}, r.talkerItems(w.i)), pairKeys{w.i})
		v.TopTalker = topTalker(v.TopUsers)
		v.Series = w.rooms.Series(rw, series)
	}
	series = make([]int64, 0, w.n)
	if c := a.crowds[name]; c == nil {
		v.SeriesJoins = append(series, make([]int64, w.n)...)
	} else {
		cw := &c.w[w.i]
		v.Joins, v.Leaves = cw.joins.Count, cw.leaves.Count
		v.SeriesJoins = w.roomJoins.Series(cw, series)
	}
	return v, nil
}

// User is one user's view of a window: its messages and the rooms they were
// in, busiest first.
func (a *Aggregator) User(name, win string, now int64) (User, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, t, _, err := a.read(win, now)
	if err != nil {
		return User{}, err
	}
	v := User{User: name, Window: w.Name, AsOf: chat.Time(t), Rooms: []RoomCount{}}
	u := a.users[name]
	if u == nil {
		return v, nil
	}
	v.Messages = u.win(w.i).count
	for _, p := range u.pairs {
		if c := p.win(w.i).tally.Count; c > 0 {
			v.Rooms = append(v.Rooms, RoomCount{Room: p.room.name, Messages: c})
		}
	}
	slices.SortFunc(v.Rooms, func(x, y RoomCount) int {
		if c := cmp.Compare(y.Messages, x.Messages); c != 0 {
			return c
		}
		return strings.Compare(x.Room, y.Room)
	})
	return v, nil
}

// Stats are the numbers behind the aggregator's metrics.
type Stats struct {
	Rooms, Users int      // tracked: with messages in some window
	Pairs        int      // tracked (room, user) pairs
	Crowds       int      // tracked rooms with joins or leaves in some window
	Members      int      // (room, user) memberships remembered (members.go)
	Late         []uint64 // per window, events it skipped as too old
}

// Stats reads the counters for metrics.
func (a *Aggregator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Stats{Rooms: len(a.rooms), Users: len(a.users), Pairs: a.pairs.n, Crowds: len(a.crowds), Members: a.members.n, Late: slices.Clone(a.late)}
}

// RoomActive reports whether room has messages, joins or leaves in some
// window: a room that has none answers the empty view of its window until
// it does (and never the other way round: a room with any answers true).
func (a *Aggregator) RoomActive(room string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.rooms[room]
	_, crowd := a.crowds[room]
	return ok || crowd
}
