package throttle

import "math/bits"

// postings is a similar key's index: each index key (fingerprint.keys) to
// the groups indexed by it. Most index keys have one group, which sits in
// the slot itself; a key of two or more has its list in lists, found by
// the slot too: not in a map keyed by the index key, which hashed it
// again, twice for each group added (a read and a write).
//
// It is an open-addressing hash table with linear probing, kept at most
// three quarters full, for the reason index (index.go) is one: an index
// key is a hash already, and a Go map would hash it again and reach its
// entry through more cache lines. A lookup here reads one slot's line, and
// the lookups are most of what a message costs a busy room. A delete
// shifts the next entries of its run back into place (Knuth's algorithm
// R), so no tombstone lengthens later probes.
type postings struct {
	slots []posting
	shift uint // 64 - log2(len(slots))
	n     int
	lists [][]int32 // the groups of keys of two or more, each of at least two
	spare []int32   // places in lists that no key has
}

// A posting is one slot: an index key and its group plus one (0: the slot
// is empty; -(i+1): the groups are lists[i]).
type posting struct {
	key uint64
	g   int32
}

const minPostings = 8

func newPostings(keys int) postings {
	size := max(minPostings, 1<<bits.Len(uint(max(4*keys/3, 1))))
	return postings{slots: make([]posting, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
}

// home is the first slot probed for index key x. Pair keys hold a
// fingerprint's smallest hash in their top bits, so x is mixed first
// (Fibonacci hashing).
func (p *postings) home(x uint64) uint64 { return (x * 0x9e3779b97f4a7c15) >> p.shift }

func (p *postings) mask() uint64 { return uint64(len(p.slots) - 1) }

// find returns the slot of x, or that of the empty slot where it would
// go.
func (p *postings) find(x uint64) uint64 {
	mask := p.mask()
	i := p.home(x)
	for p.slots[i].g != 0 && p.slots[i].key != x {
		i = (i + 1) & mask
	}
	return i
}

// lookup returns the groups indexed by x, in one when there is one: valid
// until the next change.
func (p *postings) lookup(x uint64, one *[1]int32) []int32 {
	if p.n == 0 {
		return nil
	}
	switch s := p.slots[p.find(x)]; {
	case s.g == 0:
		return nil
	case s.g > 0:
		one[0] = s.g - 1
		return one[:]
	default:
		return p.lists[-s.g-1]
	}
}

// add indexes group gi by x.
func (p *postings) add(x uint64, gi int32) {
	if 4*(p.n+1) > 3*len(p.slots) {
		p.grow()
	}
	i := p.find(x)
	switch s := &p.slots[i]; {
	case s.g == 0:
		*s = posting{key: x, g: gi + 1}
		p.n++
	case s.g > 0:
		var i int32
		if n := len(p.spare); n > 0 {
			i, p.spare = p.spare[n-1], p.spare[:n-1]
		} else {
			i = int32(len(p.lists))
			p.lists = append(p.lists, nil)
		}
		p.lists[i] = append(p.lists[i], s.g-1, gi)
		s.g = -(i + 1)
	default:
		p.lists[-s.g-1] = append(p.lists[-s.g-1], gi)
	}
}

// remove takes group gi out of x's groups; it must be there.
func (p *postings) remove(x uint64, gi int32) {
	i := p.find(x)
	if s := &p.slots[i]; s.g < 0 {
		li := -s.g - 1
		list := p.lists[li]
		j := 0
		for list[j] != gi {
			j++
		}
		list[j] = list[len(list)-1]
		list = list[:len(list)-1]
		if len(list) == 1 {
			s.g = list[0] + 1
			p.spare = append(p.spare, li)
			if list = list[:0]; cap(list) > 8 { // a wave's: not kept for the next pair
				list = nil
			}
		}
		p.lists[li] = list
		return
	}
	mask := p.mask()
	for q := i; ; {
		q = (q + 1) & mask
		s := p.slots[q]
		if s.g == 0 {
			break
		}
		if (q-p.home(s.key))&mask >= (q-i)&mask {
			p.slots[i] = s
			i = q
		}
	}
	p.slots[i] = posting{}
	p.n--
}

func (p *postings) grow() {
	old := p.slots
	lists, spare := p.lists, p.spare
	*p = newPostings(len(old))
	p.lists, p.spare = lists, spare
	mask := p.mask()
	for _, s := range old {
		if s.g == 0 {
			continue
		}
		i := p.home(s.key)
		for p.slots[i].g != 0 {
			i = (i + 1) & mask
		}
		p.slots[i] = s
		p.n++
	}
}

// keys is how many index keys p holds.
func (p *postings) keys() int { return p.n }

// each calls fn with every index key and its groups.
func (p *postings) each(fn func(x uint64, groups []int32)) {
	var one [1]int32
	for _, s := range p.slots {
		if s.g != 0 {
			fn(s.key, p.lookup(s.key, &one))
		}
	}
}
