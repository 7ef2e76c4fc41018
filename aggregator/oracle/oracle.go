// Package oracle is the brute-force reference the aggregator is tested
// against: it keeps every event (messages, joins and leaves) in a plain
// list and answers each view by scanning and sorting. It is slow on
// purpose and has no other use.
package oracle

import (
	"cmp"
	"slices"
	"strings"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// Oracle mirrors aggregator.Aggregator's observable behaviour.
type Oracle struct {
	windows []rolling.Window
	clock   int64
	evs     []chat.Event
	kept    int // events kept at the last prune
	// last is every (room, user)'s last join or leave, late ones too,
	// never forgotten; horizon, the largest window (docs/contract.md
	// section 12).
	last    map[[2]string]chat.Event
	horizon int64
	// Decided counts the joins and leaves by what the rule made of them:
	// repeats, changes after one of the other kind, and changes after the
	// last fell out of the horizon (or none was known), for tests to see
	// that their traces have each.
	Decided struct{ Repeats, Changes, Forgotten int }
}

// New returns an oracle over the given windows.
func New(windows []rolling.Window) *Oracle {
	o := &Oracle{windows: windows, clock: chat.Never, last: map[[2]string]chat.Event{}}
	for _, w := range windows {
		o.horizon = max(o.horizon, w.Size.Milliseconds())
	}
	return o
}

// repeats reports whether e is a join or a leave that repeats the last of
// its room and user, of the same kind and less than the horizon before
// it, and makes e the last.
func (o *Oracle) repeats(e chat.Event) bool {
	if e.Kind != chat.KindJoin && e.Kind != chat.KindLeave {
		return false
	}
	key := [2]string{e.Room, e.User}
	prev, ok := o.last[key]
	if !ok {
		key = [2]string{strings.Clone(e.Room), strings.Clone(e.User)}
	}
	o.last[key] = chat.Event{TS: e.TS, Kind: e.Kind}
	switch {
	case !ok || e.TS-prev.TS >= o.horizon:
		o.Decided.Forgotten++
	case prev.Kind != e.Kind:
		o.Decided.Changes++
	default:
		o.Decided.Repeats++
		return true
	}
	return false
}

// Observe takes a batch as the aggregator does and returns the indexes of
// the events that were too old for every window. A join or a leave that
// repeats its room and user's last is kept by no window.
func (o *Oracle) Observe(now int64, evs []chat.Event) (late []int) {
	o.clock = max(o.clock, now)
	for i, e := range evs {
		repeat := o.repeats(e)
		counted := false
		for _, w := range o.windows {
			if w.Bucket(e.TS) > w.Bucket(o.clock)-int64(w.Buckets()) {
				counted = true
			}
		}
		if !counted {
			late = append(late, i)
			continue
		}
		o.clock = max(o.clock, e.TS)
		if repeat {
			continue
		}
		e.Room, e.User = strings.Clone(e.Room), strings.Clone(e.User)
		o.evs = append(o.evs, e)
	}
	if len(o.evs) >= 2*o.kept {
		o.prune()
	}
	return late
}

// prune drops the events that no window can count any more: the clock
// never goes back, so they are gone for good. It only keeps the oracle
// quick; what it answers is the same.
func (o *Oracle) prune() {
	kept := o.evs[:0]
	for _, e := range o.evs {
		for _, w := range o.windows {
			if w.Bucket(e.TS) > w.Bucket(o.clock)-int64(w.Buckets()) {
				kept = append(kept, e)
				break
			}
		}
	}
	clear(o.evs[len(kept):])
	o.evs = kept
	o.kept = max(len(kept), 1024)
}

func (o *Oracle) window(name string) rolling.Window {
	if name == "" {
		return o.windows[0]
	}
	for _, w := range o.windows {
		if w.Name == name {
			return w
		}
	}
	panic("oracle: unknown window " + name)
}

// in lists the messages inside window w at as_of t, and the first bucket.
func (o *Oracle) in(w rolling.Window, t int64) (evs []chat.Event, first int64) {
	return o.inOf(chat.KindMessage, w, t)
}

// inOf lists the events of a kind inside window w at as_of t, and the
// first bucket.
func (o *Oracle) inOf(kind chat.Kind, w rolling.Window, t int64) (evs []chat.Event, first int64) {
	first = w.Bucket(t) - int64(w.Buckets()) + 1
	for _, e := range o.evs {
		if b := w.Bucket(e.TS); e.Kind == kind && b >= first && b <= w.Bucket(t) {
			evs = append(evs, e)
		}
	}
	return evs, first
}

// crowd counts the joins and leaves inside window w at as_of t of the
// rooms room says, with the joins' series (docs/contract.md section 12).
func (o *Oracle) crowd(w rolling.Window, t int64, room func(string) bool) (joins, leaves int64, seriesJoins []int64) {
	js, from := o.inOf(chat.KindJoin, w, t)
	ls, _ := o.inOf(chat.KindLeave, w, t)
	js, ls = slices.DeleteFunc(js, func(e chat.Event) bool { return !room(e.Room) }), slices.DeleteFunc(ls, func(e chat.Event) bool { return !room(e.Room) })
	return int64(len(js)), int64(len(ls)), series(w, js, from)
}

func anyRoom(string) bool { return true }

func (o *Oracle) at(now int64) int64 {
	o.clock = max(o.clock, now)
	return o.clock
}

type counted struct {
	name string
	n    int64
}

// rank counts by key and sorts: more first, then the smaller name.
func rank(evs []chat.Event, key func(chat.Event) string) []counted {
	m := map[string]int64{}
	for _, e := range evs {
		m[key(e)]++
	}
	var out []counted
	for k, n := range m {
		out = append(out, counted{k, n})
	}
	slices.SortFunc(out, func(a, b counted) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

func byUser(e chat.Event) string { return e.User }
func byRoom(e chat.Event) string { return e.Room }

func talkers(cs []counted, k int) []aggregator.Talker {
	out := []aggregator.Talker{}
	for _, c := range cs[:min(k, len(cs))] {
		out = append(out, aggregator.Talker{User: c.name, Messages: c.n})
	}
	return out
}

func first(ts []aggregator.Talker) *aggregator.Talker {
	if len(ts) == 0 {
		return nil
	}
	return &ts[0]
}

func series(w rolling.Window, evs []chat.Event, from int64) []int64 {
	s := make([]int64, w.Buckets())
	for _, e := range evs {
		s[w.Bucket(e.TS)-from]++
	}
	return s
}

func rate(w rolling.Window, n int64) float64 { return float64(n) / w.Size.Seconds() }

// Overview answers like Aggregator.Overview.
func (o *Oracle) Overview(window string, k int, now int64) aggregator.Overview {
	w, t := o.window(window), o.at(now)
	evs, from := o.in(w, t)
	users, rooms := rank(evs, byUser), rank(evs, byRoom)
	v := aggregator.Overview{
		Window: w.Name, AsOf: chat.Time(t),
		Messages: int64(len(evs)), Rate: rate(w, int64(len(evs))),
		DistinctUsers: len(users), ActiveRooms: len(rooms),
		TopUsers: talkers(users, k), TopRooms: []aggregator.RoomCount{},
		Series: series(w, evs, from),
	}
	v.Joins, v.Leaves, v.SeriesJoins = o.crowd(w, t, anyRoom)
	v.TopTalker = first(v.TopUsers)
	for _, c := range rooms[:min(k, len(rooms))] {
		v.TopRooms = append(v.TopRooms, aggregator.RoomCount{Room: c.name, Messages: c.n})
	}
	return v
}

// Rooms answers like Aggregator.Rooms.
func (o *Oracle) Rooms(window string, limit int, now int64) aggregator.Rooms {
	w, t := o.window(window), o.at(now)
	evs, _ := o.in(w, t)
	v := aggregator.Rooms{Window: w.Name, AsOf: chat.Time(t), Rooms: []aggregator.RoomSummary{}}
	rooms := rank(evs, byRoom)
	for _, c := range rooms[:min(limit, len(rooms))] {
		var in []chat.Event
		for _, e := range evs {
			if e.Room == c.name {
				in = append(in, e)
			}
		}
		users := rank(in, byUser)
		v.Rooms = append(v.Rooms, aggregator.RoomSummary{
			Room: c.name, Messages: c.n, Rate: rate(w, c.n),
			DistinctUsers: len(users), TopTalker: first(talkers(users, 1)),
		})
	}
	return v
}

// Room answers like Aggregator.Room.
func (o *Oracle) Room(name, window string, k int, now int64) aggregator.Room {
	w, t := o.window(window), o.at(now)
	all, from := o.in(w, t)
	var evs []chat.Event
	for _, e := range all {
		if e.Room == name {
			evs = append(evs, e)
		}
	}
	users := rank(evs, byUser)
	v := aggregator.Room{
		Room: name, Window: w.Name, AsOf: chat.Time(t),
		Messages: int64(len(evs)), Rate: rate(w, int64(len(evs))),
		DistinctUsers: len(users), TopUsers: talkers(users, k),
		Series: series(w, evs, from),
	}
	v.Joins, v.Leaves, v.SeriesJoins = o.crowd(w, t, func(r string) bool { return r == name })
	v.TopTalker = first(v.TopUsers)
	return v
}

// User answers like Aggregator.User.
func (o *Oracle) User(name, window string, now int64) aggregator.User {
	w, t := o.window(window), o.at(now)
	all, _ := o.in(w, t)
	var evs []chat.Event
	for _, e := range all {
		if e.User == name {
			evs = append(evs, e)
		}
	}
	v := aggregator.User{User: name, Window: w.Name, AsOf: chat.Time(t), Messages: int64(len(evs)), Rooms: []aggregator.RoomCount{}}
	for _, c := range rank(evs, byRoom) {
		v.Rooms = append(v.Rooms, aggregator.RoomCount{Room: c.name, Messages: c.n})
	}
	return v
}

// Tracked is the number of rooms and users with messages in some window at
// as_of now, and of rooms with joins or leaves: what the aggregator should
// still hold.
func (o *Oracle) Tracked(now int64) (rooms, users, crowds int) {
	t := o.at(now)
	rs, us, cs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, w := range o.windows {
		evs, _ := o.in(w, t)
		for _, e := range evs {
			rs[e.Room], us[e.User] = true, true
		}
		for _, kind := range []chat.Kind{chat.KindJoin, chat.KindLeave} {
			evs, _ := o.inOf(kind, w, t)
			for _, e := range evs {
				cs[e.Room] = true
			}
		}
	}
	return len(rs), len(us), len(cs)
}

// Members bounds the memberships an aggregator holds at as_of now: at
// least every (room, user) whose last join or leave is less than two
// horizons old (the entries that may still decide a count), at most
// those less than two and a half (it sweeps the older a quarter of that
// at a time, docs/contract.md section 12).
func (o *Oracle) Members(now int64) (least, most int) {
	t := o.at(now)
	for _, e := range o.last {
		if age := t - e.TS; age < 2*o.horizon {
			least++
			most++
		} else if age < 2*o.horizon+o.horizon/2 {
			most++
		}
	}
	return least, most
}
