package group

import "hash/fnv"

// Partition is the partition of a subject token among n: FNV-1a (32 bits)
// of the token's bytes, mod n, exactly as the NATS subject transform
// {{partition(n,i)}} computes it, so that chatpulse finds the partition
// the stream filed an event under from its name alone.
func Partition(token string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(token))
	return int(h.Sum32() % uint32(n))
}
