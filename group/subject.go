package group

import (
	"hash/fnv"
	"strings"
)

// Escape writes a room or user name as one subject token (contract
// section 8): '%', '.', '*', '>', space, and every byte below 0x21 or equal
// to 0x7F become %XX, upper-case hex; every other byte stays as it is.
// Distinct names give distinct tokens, and a token never holds a byte that
// NATS would read as a separator or a wildcard.
func Escape(name string) string {
	n := 0
	for i := 0; i < len(name); i++ {
		if escaped(name[i]) {
			n++
		}
	}
	if n == 0 {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 2*n)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !escaped(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xF])
	}
	return b.String()
}

const hex = "0123456789ABCDEF"

func escaped(c byte) bool {
	return c < 0x21 || c == 0x7F || c == '%' || c == '.' || c == '*' || c == '>'
}

// Partition is the partition of a subject token among n: FNV-1a (32 bits)
// of the token's bytes, mod n, exactly as the NATS subject transform
// {{partition(n,i)}} computes it, so that chatpulse finds the partition
// the stream filed an event under from its name alone.
func Partition(token string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(token))
	return int(h.Sum32() % uint32(n))
}
