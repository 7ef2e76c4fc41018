package aggregator

import (
	"strings"
	"unsafe"

	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/topk"
)

// The keys: rooms, users and (room, user) pairs, each with one struct per
// window. This is all the state there is besides each window's counters
// and heaps, and it is plain to walk (a snapshot can list a.rooms,
// a.users and a.pairs). The invariants:
//
//   - a.pairs (a pairTable), a.rooms and a.users hold exactly the keys with
//     messages in at least one window; live is the number of those windows;
//   - u.pairs and r.pairs list a user's and a room's pairs, and p.at and
//     p.inRoom are each pair's index in them;
//   - in window i, uw.count is the sum of the user's pairs' tallies,
//     rw.distinct the number of the room's pairs with a tally above zero,
//     and w.users the number of users with uw.count above zero;
//   - a pair's and a user's windows follow it in one allocation, and each
//     finds the other by arithmetic (block.go: win, pairOf, userOf); a
//     room reaches its windows through w, allocated with it when there are
//     at most four (withWindows), and each points back to its room.
//
// Heap entries and ring slots point at per-window structs; a key that is
// forgotten is dropped from the maps and the lists here, and the heaps and
// rings let go of it as its counts fall (topk.Heap.Fell, rolling.Keyed).
// The heaps hold nothing that the keys do not: a heap that is off is
// rebuilt from them by the next read, so a copy of the state can leave
// every heap off (its zero value).

type room struct {
	name  string
	pairs []*pair // its talkers, in any window
	w     []roomWin
	live  int // windows in which it has messages
	// Its number in the state being written, if numbered is that state's
	// mark; on loading, the last user with a pair in it.
	snap     int
	numbered uint32
}

type roomWin struct {
	item     topk.Item // in the window's top rooms: first, see roomKeys
	room     *room
	tally    rolling.Tally
	talkers  topk.Heap // its users in this window
	distinct int       // users with messages here in this window
}

// A user is followed in memory by its windows (see block.go).
type user struct {
	name  string  // in buf when it fits: see setName
	pairs []*pair // the rooms it talks in, in any window
	live  int32
	// The mark of the last state written that has it, or of the one being
	// written when it was made: see state.go.
	written uint32
	buf     [24]byte
}

type userWin struct {
	item  topk.Item // in the window's top users: first, see userKeys
	count int64     // the sum of its pairs' counts in this window
}

// A pair is followed in memory by its windows (see block.go).
type pair struct {
	room   *room
	user   *user
	at     int32 // index in user.pairs
	inRoom int32 // index in room.pairs
	live   int32
}

type pairWin struct {
	item  topk.Item // in the room's talkers: first, see pairKeys
	tally rolling.Tally
}

// The rankings' keys. Each item is the first field of its per-window
// struct, so an item a heap gives back is that struct, and the item need
// not hold the key's name and count (two words in every window of every
// pair).
type (
	pairKeys struct{ i int } // window i's
	userKeys struct{ i int } // window i's
	roomKeys struct{}
)

// An item at any offset but 0 fails to compile here.
var _ = [1]struct{}{}[unsafe.Offsetof(pairWin{}.item)+unsafe.Offsetof(userWin{}.item)+unsafe.Offsetof(roomWin{}.item)]

func pairWinOf(it *topk.Item) *pairWin { return (*pairWin)(unsafe.Pointer(it)) }
func userWinOf(it *topk.Item) *userWin { return (*userWin)(unsafe.Pointer(it)) }
func roomWinOf(it *topk.Item) *roomWin { return (*roomWin)(unsafe.Pointer(it)) }

func (pairKeys) Count(it *topk.Item) int64   { return pairWinOf(it).tally.Count }
func (k pairKeys) Name(it *topk.Item) string { return pairWinOf(it).pairOf(k.i).user.name }
func (userKeys) Count(it *topk.Item) int64   { return userWinOf(it).count }
func (k userKeys) Name(it *topk.Item) string { return userWinOf(it).userOf(k.i).name }
func (roomKeys) Count(it *topk.Item) int64   { return roomWinOf(it).tally.Count }
func (roomKeys) Name(it *topk.Item) string   { return roomWinOf(it).room.name }

func (a *Aggregator) newRoom(name string) *room {
	r, w := withWindows[room, roomWin](len(a.ws))
	r.name, r.w = strings.Clone(name), w
	for i := range r.w {
		r.w[i].room = r
	}
	a.rooms[r.name] = r
	a.peak.rooms = max(a.peak.rooms, len(a.rooms))
	return r
}

func (a *Aggregator) newUser(name string) *user {
	u := a.makeUser(name)
	a.users[u.name] = u
	a.peak.users = max(a.peak.users, len(a.users))
	return u
}

// makeUser makes a user, not yet in a.users.
func (a *Aggregator) makeUser(name string) *user {
	u := a.userBlock.make()
	u.setName(name)
	u.written = a.epoch
	return u
}

// setName keeps a copy of name, inside the user itself when it fits: the
// pair map compares an event's user with it on every lookup, and then that
// compare touches the user, which the event needs next anyway, instead of
// a string elsewhere. The bytes are never written again, and the string
// keeps the user alive, as any pointer into it would.
func (u *user) setName(name string) {
	if len(name) > len(u.buf) {
		u.name = strings.Clone(name)
		return
	}
	n := copy(u.buf[:], name)
	u.name = unsafe.String(&u.buf[0], n)
}

func (a *Aggregator) newPair(roomName, userName string, h uint64) *pair {
	r := a.rooms[roomName]
	if r == nil {
		r = a.newRoom(roomName)
	}
	u := a.users[userName]
	if u == nil {
		u = a.newUser(userName)
	}
	return a.addPair(r, u, h)
}

// addPair adds the pair of r and u, which is not there, under hash h.
func (a *Aggregator) addPair(r *room, u *user, h uint64) *pair {
	p := a.linkPair(r, u)
	a.pairs.put(h, p)
	return p
}

// linkPair makes the pair of r and u, in their lists but not yet in the
// pair table.
func (a *Aggregator) linkPair(r *room, u *user) *pair {
	p := a.makePair(r, u)
	p.inRoom = int32(len(r.pairs))
	r.pairs = append(r.pairs, p)
	return p
}

// makePair makes the pair of r and u, in u's list only: a load makes
// pairs on two goroutines (restore.go), and lists them in their rooms on
// another, in order.
func (a *Aggregator) makePair(r *room, u *user) *pair {
	p := a.pairBlock.make()
	*p = pair{room: r, user: u, at: int32(len(u.pairs))}
	u.pairs = append(u.pairs, p)
	return p
}

// withWindows allocates a key's struct and its n per-window structs as one
// object when n is small, so that one cache miss reaches a key and its
// windows, and expiry, coming from a window, finds its key next door.
func withWindows[K, W any](n int) (*K, []W) {
	switch n {
	case 1:
		return together[K](func(a *[1]W) []W { return a[:] })
	case 2:
		return together[K](func(a *[2]W) []W { return a[:] })
	case 3:
		return together[K](func(a *[3]W) []W { return a[:] })
	case 4:
		return together[K](func(a *[4]W) []W { return a[:] })
	}
	return new(K), make([]W, n)
}

func together[K, W, A any](slice func(*A) []W) (*K, []W) {
	x := new(struct {
		k K
		w A
	})
	return &x.k, slice(&x.w)
}

// forgetPair drops a pair that has no messages left in any window.
func (a *Aggregator) forgetPair(p *pair) {
	a.pairs.delete(p)
	u, r := p.user, p.room
	last := int32(len(u.pairs) - 1)
	u.pairs[p.at] = u.pairs[last]
	u.pairs[p.at].at = p.at
	u.pairs[last] = nil
	u.pairs = u.pairs[:last]
	last = int32(len(r.pairs) - 1)
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
