// Package aggregator keeps the live views of chat traffic: per window, the
// overall count and series, the messages of every active room and user,
// distinct users per room and overall, and the top talkers and rooms. It
// owns all of that state behind one lock and answers the contract's views
// (section 3) at any as_of.
//
// Every window holds two sparse keyed counters (rolling.Keyed), one for
// (room, user) pairs and one for rooms (whose cells are also the room's
// series), and a dense counter for the total. A user's count is the sum of
// its pairs', kept as they rise and fall. An event is one add to each
// counter and one push into each of three lazily-deleted heaps (topk): the
// room's talkers, the top rooms and the top users. Expiry runs through
// rolling's callbacks, which is where counts and distinct counts fall and
// where a pair, room or user with nothing left in any window is forgotten.
// So memory is bounded by what the windows hold.
//
// It never reads the wall clock: callers pass now (Unix milliseconds).
package aggregator

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/topk"
)

// ErrUnknownWindow is returned for a window name that is not configured.
var ErrUnknownWindow = errors.New("unknown window")

// MaxK is the most top users or rooms a view lists.
const MaxK = 100

// Aggregator is safe for concurrent use.
type Aggregator struct {
	mu    sync.Mutex
	ws    []*window
	rooms map[string]*room
	users map[string]*user
	clock int64 // as_of so far: the latest now or accepted event time seen
	late  []uint64
	pairs map[pairKey]*pair

	buckets []int64 // scratch: an event's bucket in each window
}

type window struct {
	rolling.Window
	i        int
	n        int64
	res      int64 // ms
	head     int64 // bucket of the aggregator's clock
	total    rolling.Counter
	pairs    *rolling.Keyed[*pairWin]
	rooms    *rolling.Keyed[*roomWin]
	users    int // users with messages in this window
	topRooms topk.Heap
	topUsers topk.Heap
}

type room struct {
	name string
	w    []roomWin
	live int // windows in which it has messages
}

type roomWin struct {
	room     *room
	tally    rolling.Tally
	item     topk.Item // in the window's top rooms
	talkers  topk.Heap // its users in this window
	distinct int       // users with messages here in this window
}

type user struct {
	name  string
	pairs []*pair // the rooms it talks in, in any window
	w     []userWin
	live  int
}

type userWin struct {
	count int64     // the sum of its pairs' counts in this window
	item  topk.Item // in the window's top users
}

type pairKey struct{ room, user string }

type pair struct {
	room *room
	user *user
	at   int // index in user.pairs
	w    []pairWin
	live int
}

type pairWin struct {
	pair  *pair
	tally rolling.Tally
	item  topk.Item // in the room's talkers
}

// New returns an aggregator over the given windows (see rolling.ParseWindows).
func New(windows []rolling.Window) (*Aggregator, error) {
	if len(windows) == 0 {
		return nil, errors.New("aggregator: no windows")
	}
	a := &Aggregator{
		rooms:   make(map[string]*room),
		users:   make(map[string]*user),
		pairs:   make(map[pairKey]*pair),
		clock:   chat.Never,
		late:    make([]uint64, len(windows)),
		buckets: make([]int64, len(windows)),
	}
	for i, spec := range windows {
		if err := spec.Validate(); err != nil {
			return nil, fmt.Errorf("aggregator: window %q: %w", spec.Name, err)
		}
		n := spec.Buckets()
		w := &window{Window: spec, i: i, n: int64(n), res: spec.Res.Milliseconds(), head: chat.Never, total: rolling.NewCounter(n)}
		w.pairs = rolling.NewKeyed(n, func(p *pairWin) *rolling.Tally { return &p.tally }, a.pairFell(w))
		w.rooms = rolling.NewKeyed(n, func(r *roomWin) *rolling.Tally { return &r.tally }, a.roomFell)
		a.ws = append(a.ws, w)
	}
	return a, nil
}

// The fell callbacks run when expiry lowers a count; a count at zero means
// the key left that window, and a key that left every window is forgotten.

func (a *Aggregator) pairFell(w *window) func(*pairWin, int64) {
	i := w.i
	return func(pw *pairWin, k int64) {
		p := pw.pair
		u := p.user
		if pw.tally.Count == 0 {
			p.room.w[i].distinct--
			if p.live--; p.live == 0 {
				delete(a.pairs, pairKey{p.room.name, u.name})
				last := len(u.pairs) - 1
				u.pairs[p.at] = u.pairs[last]
				u.pairs[p.at].at = p.at
				u.pairs[last] = nil
				u.pairs = u.pairs[:last]
			}
		}
		uw := &u.w[i]
		if uw.count -= k; uw.count == 0 {
			w.users--
			if u.live--; u.live == 0 { // so all its pairs are gone too
				delete(a.users, u.name)
			}
		}
	}
}

func (a *Aggregator) roomFell(rw *roomWin, _ int64) {
	if rw.tally.Count > 0 {
		return
	}
	r := rw.room
	if r.live--; r.live == 0 {
		delete(a.rooms, r.name)
	}
}

// tick moves the clock to T = max(now, newest accepted event time), the
// as_of of every answer. It never goes back, even if the wall clock does:
// what expired stays expired.
func (a *Aggregator) tick(now int64) int64 {
	a.clock = max(a.clock, now)
	return a.clock
}

func (w *window) bucket(t int64) int64 { return rolling.FloorDiv(t, w.res) }

// advance moves every structure of the window to bucket b.
func (w *window) advance(b int64) {
	w.head = max(w.head, b)
	w.total.Count(b)
	w.pairs.Advance(b)
	w.rooms.Advance(b)
}

// Observe counts a batch of messages, received at wall-clock time now. An
// event older than a window is skipped by that window; the indexes of events
// older than every window are appended to late and not counted. Only Room,
// User and TS of an event are read.
func (a *Aggregator) Observe(now int64, evs []chat.Event, late []int) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.advance(now)
	for i := range evs {
		if !a.observe(&evs[i]) {
			late = append(late, i)
		}
	}
	return late
}

func (a *Aggregator) observe(ev *chat.Event) bool {
	counted := false
	for _, w := range a.ws { // Observe moved every head to now: none is Never
		b := w.bucket(ev.TS)
		if b <= w.head-w.n {
			a.late[w.i]++
			b = lateBucket
		} else {
			counted = true
		}
		a.buckets[w.i] = b
	}
	if !counted {
		return false
	}
	if ev.TS > a.clock {
		// Move every window first, so that what this event's time expires
		// is gone (and maybe forgotten) before the event is counted.
		a.advance(ev.TS)
	}

	p := a.pairs[pairKey{ev.Room, ev.User}]
	if p == nil {
		p = a.newPair(ev.Room, ev.User)
	}
	r, u := p.room, p.user
	for _, w := range a.ws {
		b := a.buckets[w.i]
		if b == lateBucket {
			continue
		}
		w.total.Add(b, 1)

		pw, rw, uw := &p.w[w.i], &r.w[w.i], &u.w[w.i]
		if pw.tally.Count == 0 {
			p.live++
			rw.distinct++
		}
		w.pairs.Add(pw, b, 1)
		rw.talkers.Push(&pw.item)

		if rw.tally.Count == 0 {
			r.live++
		}
		w.rooms.Add(rw, b, 1)
		w.topRooms.Push(&rw.item)

		if uw.count == 0 {
			u.live++
			w.users++
		}
		uw.count++
		w.topUsers.Push(&uw.item)
	}
	return true
}

// lateBucket marks a window that skips the event at hand.
const lateBucket = -1 << 63

func (a *Aggregator) newRoom(name string) *room {
	r := &room{name: strings.Clone(name), w: make([]roomWin, len(a.ws))}
	for i := range r.w {
		rw := &r.w[i]
		rw.room = r
		rw.item = topk.Item{Name: r.name, Count: &rw.tally.Count}
	}
	a.rooms[r.name] = r
	return r
}

func (a *Aggregator) newUser(name string) *user {
	u := &user{name: strings.Clone(name), w: make([]userWin, len(a.ws))}
	for i := range u.w {
		uw := &u.w[i]
		uw.item = topk.Item{Name: u.name, Count: &uw.count}
	}
	a.users[u.name] = u
	return u
}

func (a *Aggregator) newPair(roomName, userName string) *pair {
	r := a.rooms[roomName]
	if r == nil {
		r = a.newRoom(roomName)
	}
	u := a.users[userName]
	if u == nil {
		u = a.newUser(userName)
	}
	p := &pair{room: r, user: u, at: len(u.pairs), w: make([]pairWin, len(a.ws))}
	for i := range p.w {
		pw := &p.w[i]
		pw.pair = p
		pw.item = topk.Item{Name: u.name, Count: &pw.tally.Count}
	}
	u.pairs = append(u.pairs, p)
	a.pairs[pairKey{r.name, u.name}] = p
	return p
}

// Advance brings every window up to now, forgetting what expired. Counts are
// right without it (every read catches up first); it only frees memory
// sooner when nothing else calls in.
func (a *Aggregator) Advance(now int64) {
	a.mu.Lock()
	a.advance(now)
	a.mu.Unlock()
}

func (a *Aggregator) advance(now int64) {
	t := a.tick(now)
	for _, w := range a.ws {
		w.advance(w.bucket(t))
	}
}

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

func (w *window) rate(messages int64) float64 { return float64(messages) / w.Size.Seconds() }

func talkers(items []*topk.Item) []Talker {
	out := make([]Talker, len(items))
	for i, it := range items {
		out[i] = Talker{User: it.Name, Messages: *it.Count}
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
		TopUsers:      talkers(w.topUsers.Top(k, items[:0])),
		Series:        w.total.Series(b, make([]int64, 0, w.n)),
	}
	v.Rate = w.rate(v.Messages)
	v.TopTalker = topTalker(v.TopUsers)
	top := w.topRooms.Top(k, items[:0])
	v.TopRooms = make([]RoomCount, len(top))
	for i, it := range top {
		v.TopRooms[i] = RoomCount{Room: it.Name, Messages: *it.Count}
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
	top := w.topRooms.Top(limit, nil)
	v := Rooms{Window: w.Name, AsOf: chat.Time(t), Rooms: make([]RoomSummary, len(top))}
	var one [1]*topk.Item
	for i, it := range top {
		rw := &a.rooms[it.Name].w[w.i]
		s := RoomSummary{Room: it.Name, Messages: *it.Count, Rate: w.rate(*it.Count), DistinctUsers: rw.distinct}
		if tt := rw.talkers.Top(1, one[:0]); len(tt) > 0 {
			s.TopTalker = &Talker{User: tt[0].Name, Messages: *tt[0].Count}
		}
		v.Rooms[i] = s
	}
	return v, nil
}

// Room is one room's view of a window; a room without messages in it
// answers zeros.
func (a *Aggregator) Room(name, win string, k int, now int64) (Room, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, t, _, err := a.read(win, now)
	if err != nil {
		return Room{}, err
	}
	v := Room{Room: name, Window: w.Name, AsOf: chat.Time(t), TopUsers: []Talker{}}
	series := make([]int64, 0, w.n)
	r := a.rooms[name]
	if r == nil || r.w[w.i].tally.Count == 0 {
		v.Series = append(series, make([]int64, w.n)...)
		return v, nil
	}
	rw := &r.w[w.i]
	var items [MaxK]*topk.Item
	v.Messages = rw.tally.Count
	v.Rate = w.rate(v.Messages)
	v.DistinctUsers = rw.distinct
	v.TopUsers = talkers(rw.talkers.Top(k, items[:0]))
	v.TopTalker = topTalker(v.TopUsers)
	v.Series = w.rooms.Series(rw, series)
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
	v.Messages = u.w[w.i].count
	for _, p := range u.pairs {
		if c := p.w[w.i].tally.Count; c > 0 {
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
	Late         []uint64 // per window, events it skipped as too old
}

// Stats reads the counters for metrics.
func (a *Aggregator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Stats{Rooms: len(a.rooms), Users: len(a.users), Pairs: len(a.pairs), Late: slices.Clone(a.late)}
}
