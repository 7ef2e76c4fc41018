package aggregator

import "hash/maphash"

// pairTable finds a (room, user) pair by the two names: every event's first
// step. It is a hash table with open addressing and linear probing over a
// power-of-two array of slots, each holding a pair, its user and the hash
// of their names, and nothing else. A Go map would hold the two names as
// its key and compare them where they are stored, a cache miss each; here
// a slot whose hash matches is checked against the pair itself and its
// user, which the event needs next anyway (the user keeps its name inside
// it, see user.setName), both found from the slot so that their misses
// overlap. Hashes are seeded per table, so nobody can choose
// names that collide.
//
// Slots are kept between a quarter and three quarters full: a table grows
// to twice its size when it would pass three quarters and is rebuilt at
// the size its pairs need once they fill less than an eighth of it, so a
// flood of pairs that went quiet gives its room back. Deletion shifts the
// slots after the deleted one back (no tombstones), so a lookup's probe
// never passes more than the pairs that share its stretch of the array.
type pairTable struct {
	seed  maphash.Seed
	slots []pairSlot
	n     int    // pairs held
	sink  uint64 // where putAll's early loads go
}

type pairSlot struct {
	h uint64
	p *pair // nil: the slot is free
	u *user // p's, so that checking a match loads p and u side by side
}

const minSlots = 64

func newPairTable() pairTable {
	return pairTable{seed: maphash.MakeSeed(), slots: make([]pairSlot, minSlots)}
}

func (t *pairTable) hash(room, user string) uint64 {
	return t.hashRoom(room) ^ t.hashUser(user)
}

// Two seeded hashes, the room's mixed by an odd multiplier (a bijection)
// so that (a, b) and (b, a) differ; a pair's hash is their xor.
func (t *pairTable) hashRoom(room string) uint64 {
	return maphash.String(t.seed, room) * 0x9e3779b97f4a7c15
}

func (t *pairTable) hashUser(user string) uint64 {
	return maphash.String(t.seed, user)
}

// get returns the pair of room and user, or nil, and the hash to put it
// with.
func (t *pairTable) get(room, user string) (*pair, uint64) {
	h := t.hash(room, user)
	mask := len(t.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.p == nil {
			return nil, h
		}
		if s.h == h && s.u.name == user && s.p.room.name == room {
			return s.p, h
		}
	}
}

// putAll adds pairs, none of which is in the table, under the hashes
// their slots hold: a restore's, by the chunk. It loads every home slot
// before it places any, so that their cache misses overlap, where one put
// after another would wait for each.
func (t *pairTable) putAll(ss []pairSlot) {
	t.reserve(t.n + len(ss))
	mask := len(t.slots) - 1
	var sink uint64
	for _, s := range ss {
		sink += t.slots[int(s.h)&mask].h
	}
	t.sink = sink
	for _, s := range ss {
		t.place(s)
	}
	t.n += len(ss)
}

// put adds p, which is not in the table, under hash h.
func (t *pairTable) put(h uint64, p *pair) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(2 * len(t.slots))
	}
	t.place(pairSlot{h, p, p.user})
	t.n++
}

func (t *pairTable) place(s pairSlot) {
	mask := len(t.slots) - 1
	i := int(s.h) & mask
	for t.slots[i].p != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// delete removes p, which is in the table.
func (t *pairTable) delete(p *pair) {
	mask := len(t.slots) - 1
	i := int(t.hash(p.room.name, p.user.name)) & mask
	for t.slots[i].p != p {
		i = (i + 1) & mask
	}
	// Shift back every later slot of the run that may move into the hole:
	// one whose home (where its probe starts) is not after the hole.
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.p == nil {
			break
		}
		if home := int(s.h) & mask; (j-home)&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = pairSlot{}
	t.n--
	if 8*t.n < len(t.slots) && len(t.slots) > minSlots {
		t.resize(len(t.slots) / 4)
	}
}

// resize moves every pair into a new array of size slots.
func (t *pairTable) resize(size int) {
	old := t.slots
	t.slots = make([]pairSlot, max(size, minSlots))
	for _, s := range old {
		if s.p != nil {
			t.place(s)
		}
	}
}

// each calls fn with every pair, in no particular order.
func (t *pairTable) each(fn func(*pair)) {
	for _, s := range t.slots {
		if s.p != nil {
			fn(s.p)
		}
	}
}

// reserve makes room for n pairs in all, so that adding them does not
// grow the table step by step.
func (t *pairTable) reserve(n int) {
	size := minSlots
	for 4*n > 3*size {
		size *= 2
	}
	if size > len(t.slots) {
		t.resize(size)
	}
}
