package lease

import "hash/fnv"

// OwnerOf picks the owner of partition p among the live members: the one
// with the highest weight for p (rendezvous, or highest-random-weight,
// hashing). Every member computes the same answer from the same member set,
// with no coordination, and when a member joins or leaves only the
// partitions it wins or held change hands: about 1/n of them, not the
// contiguous blocks a modulus or a range split would move.
func OwnerOf(p int, members []string) string {
	best, bestW := "", uint64(0)
	for _, m := range members {
		if w := weight(m, p); best == "" || w > bestW || w == bestW && m < best {
			best, bestW = m, w
		}
	}
	return best
}

// weight is a 64-bit FNV-1a of the member's name and the partition,
// finished with a mixer so that names differing in one byte still spread.
func weight(member string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0, byte(p), byte(p >> 8), byte(p >> 16), byte(p >> 24)})
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
