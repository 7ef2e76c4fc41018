package throttle

import "math/bits"

// A similar key's groups (simstore.go) hold nothing the garbage collector
// has to visit for most messages: the fingerprint's hashes are a block of
// the key's one hash array (hashSlab), and a group of one message, most
// groups, keeps it in place. Allocating a slice of hashes and one of
// members for each new text was most of what a message cost the collector
// and the allocator while a window fills, and each was another object to
// mark for as long as the window held it.

// A simGroup is the messages of one fingerprint in a key's window.
type simGroup struct {
	off   int32 // the fingerprint's hashes are the key's hashes.h[off:off+n]
	n     uint8 // at most simK
	cut   bool
	count int32  // its messages
	key   uint64 // its first index key (fingerprint.keys): most have one
	seen  uint64
	one   [1]member // its message while it has one
	many  []member  // its messages, in the order they came, while it has two or more; else their room
}

// A member is one message of a group.
type member struct {
	at   int64
	user uint64 // nameHash of its user
}

// members returns g's messages, in the order they came: valid until g
// changes.
func (g *simGroup) members() []member {
	if g.count == 1 {
		return g.one[:]
	}
	return g.many[:g.count]
}

// push adds m as g's newest message.
func (g *simGroup) push(m member) {
	switch g.count {
	case 0:
		g.one[0] = m
	case 1:
		g.many = append(g.many[:0], g.one[0], m)
	default:
		g.many = append(g.many, m)
	}
	g.count++
}

// drop takes out g's j-th message.
func (g *simGroup) drop(j int) {
	switch {
	case g.count == 1:
	case j == 0 && g.count > 2:
		g.many = g.many[1:]
	default:
		g.many = append(g.many[:j], g.many[j+1:g.count]...)
	}
	if g.count--; g.count == 1 {
		g.one[0], g.many = g.many[0], g.many[:0]
	}
}

// fp is the fingerprint of group g of k: its hashes are k's, valid until
// k's groups change.
func (k *simKey) fp(g *simGroup) fingerprint {
	end := g.off + int32(g.n)
	return fingerprint{h: k.hashes.h[g.off:end:end], cut: g.cut}
}

// A hashSlab holds the hashes of a key's fingerprints, each in a block of
// a power of two of them (its class: 1 to simK), so that a block a group
// left is reused by the next group of its class. It holds at most about
// twice the live hashes, and its blocks free (expire shrinks a key whose
// slab is four times what it holds).
type hashSlab struct {
	h    []uint32
	free [hashClasses][]int32 // by class: blocks of no group
	live int                  // hashes in blocks groups hold
}

const hashClasses = 8 // blocks of 1, 2, 4, ... simK hashes

// class is the class of a block of n hashes, 1 <= n <= simK.
func hashClass(n int) int { return bits.Len(uint(n - 1)) }

// put stores h, of 1 to simK hashes, in a block, and returns its offset.
func (s *hashSlab) put(h []uint32) int32 {
	c := hashClass(len(h))
	s.live += 1 << c
	var off int32
	if free := s.free[c]; len(free) > 0 {
		off, s.free[c] = free[len(free)-1], free[:len(free)-1]
	} else {
		off = int32(len(s.h))
		s.h = grow(s.h, 1<<c)
		s.h = s.h[:len(s.h)+1<<c]
	}
	copy(s.h[off:], h)
	return off
}

// release frees the block of n hashes at off.
func (s *hashSlab) release(off int32, n int) {
	c := hashClass(n)
	s.live -= 1 << c
	s.free[c] = append(s.free[c], off)
}

// sparse reports whether s holds four times or more what its groups do,
// and is large enough for that to matter.
func (s *hashSlab) sparse() bool { return len(s.h) >= 1024 && len(s.h) >= 4*s.live }
