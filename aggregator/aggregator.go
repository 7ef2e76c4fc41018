package aggregator

import (
	"errors"
	"fmt"
	"math"
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
	// Rooms with joins or leaves: crowds.go; the last membership of
	// each (room, user): members.go.
	crowds  map[string]*crowd
	members members
	clock   int64 // as_of so far: the latest now or accepted event time seen
	late    []uint64
	pairs   pairTable
	// How a pair or a user and its windows are allocated (block.go).
	pairBlock block[pair, pairWin]
	userBlock block[user, userWin]
	peak      struct{ rooms, users, crowds int } // the maps' sizes, for shrunk

	buckets []int64 // scratch: an event's bucket in each window
	found   []*pair // scratch: the pairs of a batch's events

	// The state being written, if any (state.go), and its mark.
	cow   *StateWriter
	epoch uint32
}

type window struct {
	rolling.Window
	i        int
	n        int64
	res      int64 // ms
	head     int64 // bucket of the aggregator's clock
	start    int64 // the head bucket's first instant, in ms
	next     int64 // the next bucket's: the window moves when the clock gets there
	total    rolling.Counter
	pairs    *rolling.Keyed[*pairWin]
	rooms    *rolling.Keyed[*roomWin]
	users    int // users with messages in this window
	topRooms topk.Heap
	topUsers topk.Heap
	// Joins and leaves (crowds.go): the totals, and per room.
	joins, leaves         rolling.Counter
	roomJoins, roomLeaves *rolling.Keyed[*crowdWin]
}

// New returns an aggregator over the given windows (see rolling.ParseWindows).
func New(windows []rolling.Window) (*Aggregator, error) {
	if len(windows) == 0 {
		return nil, errors.New("aggregator: no windows")
	}
	for _, spec := range windows {
		if err := spec.Validate(); err != nil {
			return nil, fmt.Errorf("aggregator: window %q: %w", spec.Name, err)
		}
	}
	a := &Aggregator{}
	a.init(windows)
	return a, nil
}

// init makes a empty, over valid windows (its lock aside: LoadState holds
// it meanwhile).
func (a *Aggregator) init(windows []rolling.Window) {
	a.ws, a.found, a.peak, a.cow = nil, nil, struct{ rooms, users, crowds int }{}, nil
	a.rooms, a.users, a.pairs = make(map[string]*room), make(map[string]*user), newPairTable()
	a.pairBlock, a.userBlock = newBlock[pair, pairWin](len(windows)), newBlock[user, userWin](len(windows))
	a.crowds = make(map[string]*crowd)
	var largest int64
	for _, spec := range windows {
		largest = max(largest, spec.Size.Milliseconds())
	}
	a.members = newMembers(largest)
	a.clock, a.late, a.buckets = chat.Never, make([]uint64, len(windows)), make([]int64, len(windows))
	for i, spec := range windows {
		n := spec.Buckets()
		w := &window{Window: spec, i: i, n: int64(n), res: spec.Res.Milliseconds(), head: chat.Never, next: chat.Never, total: rolling.NewCounter(n)}
		w.pairs = rolling.NewKeyed(n, func(p *pairWin) *rolling.Tally { return &p.tally }, a.pairFell(w))
		w.rooms = rolling.NewKeyed(n, func(r *roomWin) *rolling.Tally { return &r.tally }, a.roomFell(w))
		w.joins, w.leaves = rolling.NewCounter(n), rolling.NewCounter(n)
		w.roomJoins = rolling.NewKeyed(n, joinsOf, a.crowdFell(joinsOf))
		w.roomLeaves = rolling.NewKeyed(n, leavesOf, a.crowdFell(leavesOf))
		a.ws = append(a.ws, w)
	}
}

// The fell callbacks run when expiry lowers a count; a count at zero means
// the key left that window, and a key that left every window is forgotten.

func (a *Aggregator) pairFell(w *window) func(*pairWin, int64) {
	i := w.i
	return func(pw *pairWin, k int64) {
		p := pw.pairOf(i)
		u := p.user
		if pw.tally.Count == 0 {
			rw := &p.room.w[i]
			rw.distinct--
			rw.talkers.Fell(rw.distinct)
			if p.live--; p.live == 0 {
				a.forgetPair(p)
			}
		}
		uw := u.win(i)
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
	if b <= w.head {
		return
	}
	w.head, w.start = b, b*w.res
	w.next = math.MaxInt64 // the end of time, where t+res would overflow
	if w.start <= math.MaxInt64-w.res {
		w.next = w.start + w.res
	}
	w.total.Count(b)
	w.pairs.Advance(b)
	w.rooms.Advance(b)
	w.joins.Count(b)
	w.leaves.Count(b)
	w.roomJoins.Advance(b)
	w.roomLeaves.Advance(b)
}

// Observe counts a batch of events, received at wall-clock time now:
// messages, and joins and leaves apart from them (crowds.go). An event
// older than a window is skipped by that window; the indexes of events
// older than every window are appended to late and not counted. A join or
// a leave that repeats its (room, user)'s last one (members.go) is counted
// nowhere, and its Kind set to chat.KindRepeat, so that the throttle
// policies fed the batch next skip it too (so a batch is for one
// aggregator: another would take its repeats for no join or leave at all).
// Only Room, User, TS and Kind of an event are read.
func (a *Aggregator) Observe(now int64, evs []chat.Event, late []int) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.advance(now)
	// Find every event's pair first: each lookup is a few cache misses, and
	// in a loop of lookups alone they overlap, where between the counting
	// of one event and the next they would wait their turn.
	found := a.found[:0]
	for i := range evs {
		var p *pair
		if evs[i].Kind == chat.KindMessage {
			p, _ = a.pairs.get(evs[i].Room, evs[i].User)
		}
		found = append(found, p)
	}
	for i := range evs {
		ev := &evs[i]
		changes := ev.Kind == chat.KindMessage || a.members.changes(ev, a.clock)
		switch {
		case !a.place(ev.TS):
			late = append(late, i)
		case ev.Kind == chat.KindMessage:
			a.observe(ev, found[i])
		case changes:
			a.observeCrowd(ev)
		default:
			ev.Kind = chat.KindRepeat
		}
	}
	clear(found) // keep no forgotten pair reachable
	a.found = found[:0]
	return late
}

// observe counts one message, whose buckets place found, and whose pair
// was p (or none) when the batch began.
func (a *Aggregator) observe(ev *chat.Event, p *pair) {
	if p == nil || p.live == 0 { // new, or forgotten since the batch began
		var h uint64
		if p, h = a.pairs.get(ev.Room, ev.User); p == nil {
			p = a.newPair(ev.Room, ev.User, h)
		}
	}
	r, u := p.room, p.user
	if a.cow != nil && u.written != a.epoch {
		a.cow.write(u) // as it was when the state started, before this event
	}
	for _, w := range a.ws {
		b := a.buckets[w.i]
		if b == lateBucket {
			continue
		}
		w.total.Add(b, 1)

		pw, rw, uw := p.win(w.i), &r.w[w.i], u.win(w.i)
		if pw.tally.Count == 0 {
			p.live++
			rw.distinct++
		}
		w.pairs.Add(pw, &pw.tally, b, 1)
		rw.talkers.Push(&pw.item, pw.tally.Count)

		if rw.tally.Count == 0 {
			r.live++
		}
		w.rooms.Add(rw, &rw.tally, b, 1)
		w.topRooms.Push(&rw.item, rw.tally.Count)

		if uw.count == 0 {
			u.live++
			w.users++
		}
		uw.count++
		w.topUsers.Push(&uw.item, uw.count)
	}
}

// place finds the bucket in every window of an event at ts, marking the
// windows it is too old for, and reports whether any window counts it.
// Most events land in the head bucket, which takes no division to see.
func (a *Aggregator) place(ts int64) bool {
	if ts > a.clock {
		// Move every window first, so that what this event's time expires
		// is gone (and maybe forgotten) before the event is counted, in
		// every window's newest bucket.
		a.advance(ts)
		for _, w := range a.ws {
			a.buckets[w.i] = w.head
		}
		return true
	}
	counted := false
	for _, w := range a.ws { // Observe moved every head to now: none is Never
		b := w.head
		if ts < w.start {
			b = w.bucket(ts)
		}
		if b <= w.head-w.n {
			a.late[w.i]++
			b = lateBucket
		} else {
			counted = true
		}
		a.buckets[w.i] = b
	}
	return counted
}

// lateBucket marks a window that skips the event at hand.
const lateBucket = -1 << 63

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
		if t >= w.next {
			w.advance(w.bucket(t))
		}
	}
	a.members.sweep(t)
}
