package throttle

import (
	"math/bits"
)

// index maps the 64-bit hash of a key to the key's place in a table's slabs.
// It is an open-addressing hash table with linear probing, kept at most half
// full, whose slots are single words: the high 32 bits of the key's hash (the
// tag) and the place plus one (0: empty). A key's home slot is given by the
// top bits of its hash, so by the top bits of its tag: growing needs neither
// the keys nor their hashes, only the slots.
//
// Why not a Go map: the table has the key's hash already (a Set hashes a
// message's user and room once for all its policies), where a map would
// hash the key again, and hold a copy of it; and a map's deletes leave
// tombstones that lengthen later probes until it prunes or rehashes them.
// Here a delete shifts the next entries of its run back into place (Knuth's
// algorithm R), so probes stay short however many keys come and go, and a
// slot holds no pointer for the garbage collector to scan.
//
// The index only finds candidates: the caller compares the tag's key with
// its own. Two keys with the same tag cost one more comparison, never a
// wrong answer.
type index struct {
	slots []uint64
	shift uint // 64 - log2(len(slots)): home(h) = h >> shift
	n     int
}

const minSlots = 8

// newIndex returns an index with room for keys keys before it grows.
func newIndex(keys int) index {
	size := max(minSlots, 1<<bits.Len(uint(max(2*keys-1, 0))))
	return index{slots: make([]uint64, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
}

func (x *index) mask() uint64 { return uint64(len(x.slots) - 1) }

// home is the first slot probed for a slot's entry.
func (x *index) home(slot uint64) uint64 { return slot >> 32 >> (x.shift - 32) }

// insert adds place i under hash h; the key must not be there already.
func (x *index) insert(h uint64, i int32) {
	if 2*(x.n+1) > len(x.slots) {
		x.grow()
	}
	mask := x.mask()
	p := h >> x.shift
	for x.slots[p] != 0 {
		p = (p + 1) & mask
	}
	x.slots[p] = h&^(1<<32-1) | uint64(uint32(i+1))
	x.n++
}

// remove deletes place i, stored under hash h.
func (x *index) remove(h uint64, i int32) {
	mask, want := x.mask(), h&^(1<<32-1)|uint64(uint32(i+1))
	p := h >> x.shift
	for x.slots[p] != want {
		p = (p + 1) & mask
	}
	// Shift back every later entry of the run that may move to the hole: one
	// whose home is not cyclically in (p, q].
	for q := p; ; {
		q = (q + 1) & mask
		s := x.slots[q]
		if s == 0 {
			break
		}
		if (q-x.home(s))&mask >= (q-p)&mask {
			x.slots[p] = s
			p = q
		}
	}
	x.slots[p] = 0
	x.n--
}

func (x *index) grow() {
	old := x.slots
	*x = newIndex(len(old))
	x.rehash(old)
}

// rehash inserts the entries of old slots into x, which is empty and large
// enough.
func (x *index) rehash(old []uint64) {
	mask := x.mask()
	for _, s := range old {
		if s == 0 {
			continue
		}
		p := x.home(s)
		for x.slots[p] != 0 {
			p = (p + 1) & mask
		}
		x.slots[p] = s
		x.n++
	}
}
