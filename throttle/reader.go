package throttle

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// A saved state (Set.AppendState) is written with encoding/binary's
// varints, and strings with their length first (appendString). A reader
// reads it back, as bytes from a disk or a network that may be corrupt or
// hostile: it checks every number against the bound its caller gives and
// every length against the bytes left, so that nothing it reads can make
// its caller index out of range, or allocate for more than the input
// holds.
// Its first error sticks: every read after it returns zero, so a decoder
// may read on and check err once in a while, but must not index with what
// it reads before it checks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// next returns the next n bytes, or nil.
func (r *reader) next(n int) []byte {
	if n > len(r.b) {
		r.fail("truncated")
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

// uvarint reads a number as binary.AppendUvarint writes it, in as few
// bytes as it takes: a state is read only as AppendState writes it, so
// that a state loaded saves as it was.
func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || n > 1 && r.b[n-1] == 0 {
		r.fail("truncated, overflowing or overlong number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1) // as binary.Varint decodes it
}

// uvarintUpTo reads a number of at most most.
func (r *reader) uvarintUpTo(most uint64, what string) uint64 {
	v := r.uvarint()
	if v > most {
		r.fail("%d %s, more than %d", v, what, most)
		return 0
	}
	return v
}

func (r *reader) uint32() uint32 { return uint32(r.uvarintUpTo(math.MaxUint32, "as a count")) }

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// string reads what appendString wrote.
func (r *reader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("truncated")
		return ""
	}
	return string(r.next(int(n)))
}

// period reads the number of a period of w ms (a window or a bucket) that
// an instant in int64 is in, or chat.Never.
func (r *reader) period(w int64) int64 {
	p := r.varint()
	if lo, hi := rolling.FloorDiv(math.MinInt64, w), math.MaxInt64/w; p != chat.Never && (p < lo || p > hi) {
		r.fail("period %d is out of range (%d to %d)", p, lo, hi)
	}
	return p
}
