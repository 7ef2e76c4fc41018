package chat

import "strings"

// Token writes a room or user name as one subject token, as events are
// published in a group (docs/contract.md section 8): '%', '.', '*', '>', space, and every byte below 0x21 or equal
// to 0x7F become %XX, upper-case hex; every other byte stays as it is.
// Distinct names give distinct tokens, and a token never holds a byte that
// NATS would read as a separator or a wildcard.
func Token(name string) string {
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

// IsToken reports whether token is Token(name), without building it.
func IsToken(token, name string) bool {
	j := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !escaped(c) {
			if j >= len(token) || token[j] != c {
				return false
			}
			j++
			continue
		}
		if j+3 > len(token) || token[j] != '%' || token[j+1] != hex[c>>4] || token[j+2] != hex[c&0xF] {
			return false
		}
		j += 3
	}
	return j == len(token)
}
