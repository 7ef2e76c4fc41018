package aggregator

import (
	"errors"
	"fmt"
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
	peak  struct{ rooms, users, pairs int } // the maps' sizes, for shrunk

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
	name  string
	pairs []*pair // its talkers, in any window
	w     []roomWin
	live  int // windows in which it has messages
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
	room   *room
	user   *user
	at     int // index in user.pairs
	inRoom int // index in room.pairs
	w      []pairWin
	live   int
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
		w.rooms = rolling.NewKeyed(n, func(r *roomWin) *rolling.Tally { return &r.tally }, a.roomFell(w))
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
			rw := &p.room.w[i]
			rw.distinct--
			rw.talkers.Fell(rw.distinct)
			if p.live--; p.live == 0 {
				a.forgetPair(p)
			}
		}
		uw := &u.w[i]
		if uw.count -= k; uw.count == 0 {
			w.users--
			w.topUsers.Fell(w.users)
			if u.live--; u.live == 0 { // so all its pairs are gone too
				delete(a.users, u.name)
				a.users = shrunk(a.users, &a.peak.users)
			}
		}
	}
}

func (a *Aggregator) roomFell(w *window) func(*roomWin, int64) {
	return func(rw *roomWin, _ int64) {
		if rw.tally.Count > 0 {
			return
		}
		w.topRooms.Fell(w.rooms.Keys())
		r := rw.room
		if r.live--; r.live == 0 {
			delete(a.rooms, r.name)
			a.rooms = shrunk(a.rooms, &a.peak.rooms)
		}
	}
}

// forgetPair drops a pair that has no messages left in any window.
func (a *Aggregator) forgetPair(p *pair) {
	delete(a.pairs, pairKey{p.room.name, p.user.name})
	a.pairs = shrunk(a.pairs, &a.peak.pairs)
	u, r := p.user, p.room
	last := len(u.pairs) - 1
	u.pairs[p.at] = u.pairs[last]
	u.pairs[p.at].at = p.at
	u.pairs[last] = nil
	u.pairs = u.pairs[:last]
	last = len(r.pairs) - 1
	r.pairs[p.inRoom] = r.pairs[last]
	r.pairs[p.inRoom].inRoom = p.inRoom
	r.pairs[last] = nil
	r.pairs = r.pairs[:last]
}

// shrunk returns m, or a copy of it once it holds less than a quarter of
// the keys it held at its peak: Go maps never give back the space of
// deleted keys, and a flood of keys that went quiet would keep it. The
// copy costs O(len(m)), paid for by the three times as many deletions
// since the peak.
func shrunk[K comparable, V any](m map[K]V, peak *int) map[K]V {
	if *peak < minShrink || 4*len(m) >= *peak {
		return m
	}
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	*peak = len(m)
	return c
}

// minShrink is the smallest peak worth shrinking a map from.
const minShrink = 64

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
	a.peak.rooms = max(a.peak.rooms, len(a.rooms))
	return r
}

func (a *Aggregator) newUser(name string) *user {
	u := &user{name: strings.Clone(name), w: make([]userWin, len(a.ws))}
	for i := range u.w {
		uw := &u.w[i]
		uw.item = topk.Item{Name: u.name, Count: &uw.count}
	}
	a.users[u.name] = u
	a.peak.users = max(a.peak.users, len(a.users))
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
	p := &pair{room: r, user: u, at: len(u.pairs), inRoom: len(r.pairs), w: make([]pairWin, len(a.ws))}
	for i := range p.w {
		pw := &p.w[i]
		pw.pair = p
		pw.item = topk.Item{Name: u.name, Count: &pw.tally.Count}
	}
	u.pairs = append(u.pairs, p)
	r.pairs = append(r.pairs, p)
	a.pairs[pairKey{r.name, u.name}] = p
	a.peak.pairs = max(a.peak.pairs, len(a.pairs))
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
