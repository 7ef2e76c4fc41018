package throttle

import (
	"maps"
	"slices"
	"sort"
)

// windowUsers counts the distinct users of a room's window exactly. Each
// user has one map entry: the bucket of its newest message. An entry whose
// bucket has left the window (at or below floor, the bucket before the
// window's oldest) is stale, and counts as absent. newest counts the users
// by the bucket of their newest message, so that a bucket leaving the
// window takes its users out in one step. A message costs one or two map
// operations when it comes, and none when it leaves the window.
//
// The stale entries are dropped all at once, into a map sized for the
// live ones, once they are more than the live ones and 64 more: so the map
// holds at most about twice the window's users, and gives a flood's
// memory back.
type windowUsers struct {
	last   map[uint64]int64
	newest []bucketCount // by bucket, oldest first; each n at least 1
	n      int64         // the live users: the sum of newest's counts
}

// add counts a message of user at bucket b, in the window above floor.
func (w *windowUsers) add(user uint64, b, floor int64) {
	old, ok := w.last[user]
	switch {
	case ok && old > floor && old >= b:
		return
	case ok && old > floor:
		w.dec(old)
	default:
		w.n++
	}
	if w.last == nil {
		w.last = make(map[uint64]int64)
	}
	w.last[user] = b
	w.inc(b)
	if !ok {
		w.prune(floor)
	}
}

// take takes out a message of user at bucket b, in the window above
// floor, that has left recent already: the user's newest is then the
// newest of its messages still in recent, if any.
func (w *windowUsers) take(user uint64, b, floor int64, recent []post) {
	if w.last[user] != b {
		return // a newer message of the user is its newest
	}
	w.dec(b)
	for i := len(recent) - 1; i >= 0 && recent[i].b > floor; i-- {
		if recent[i].user == user {
			w.last[user] = recent[i].b
			w.inc(recent[i].b)
			return
		}
	}
	delete(w.last, user)
	w.n--
	w.prune(floor)
}

// leave takes out the users whose newest message is at or below floor:
// the window has moved past them.
func (w *windowUsers) leave(floor int64) {
	i := 0
	for ; i < len(w.newest) && w.newest[i].b <= floor; i++ {
		w.n -= int64(w.newest[i].n)
	}
	w.newest = w.newest[i:]
	w.prune(floor)
}

// leaving is how many of the users would leave if the window moved to
// floor: leave's count, read only.
func (w *windowUsers) leaving(floor int64) int64 {
	gone := int64(0)
	for i := 0; i < len(w.newest) && w.newest[i].b <= floor; i++ {
		gone += int64(w.newest[i].n)
	}
	return gone
}

// reset forgets every user.
func (w *windowUsers) reset() {
	if len(w.last) > 64 {
		w.last = nil
	} else {
		clear(w.last)
	}
	w.newest, w.n = w.newest[:0], 0
}

// prune drops the stale entries if they are too many (see windowUsers).
func (w *windowUsers) prune(floor int64) {
	if int64(len(w.last)) <= 2*w.n+64 {
		return
	}
	live := make(map[uint64]int64, w.n)
	for u, b := range w.last {
		if b > floor {
			live[u] = b
		}
	}
	w.last = live
}

func (w *windowUsers) clone() windowUsers {
	return windowUsers{last: maps.Clone(w.last), newest: slices.Clone(w.newest), n: w.n}
}

// inc counts one more user whose newest message is at bucket b.
func (w *windowUsers) inc(b int64) {
	if n := len(w.newest); n > 0 && w.newest[n-1].b == b {
		w.newest[n-1].n++
		return
	} else if n == 0 || w.newest[n-1].b < b {
		w.newest = append(w.newest, bucketCount{b: b, n: 1})
		return
	}
	i := sort.Search(len(w.newest), func(i int) bool { return w.newest[i].b >= b })
	if w.newest[i].b == b {
		w.newest[i].n++
	} else {
		w.newest = slices.Insert(w.newest, i, bucketCount{b: b, n: 1})
	}
}

// dec counts one user fewer whose newest message is at bucket b.
func (w *windowUsers) dec(b int64) {
	i := sort.Search(len(w.newest), func(i int) bool { return w.newest[i].b >= b })
	if w.newest[i].n--; w.newest[i].n == 0 {
		w.newest = slices.Delete(w.newest, i, i+1)
	}
}
