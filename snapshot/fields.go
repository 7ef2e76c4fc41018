package snapshot

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The fields of a snapshot, and of the states in its stages (the
// aggregator's and the throttle set's), are written in one dialect, with
// the Append functions, and read back with a Reader:
//
//	uvarint  a number as binary.AppendUvarint writes it, in as few bytes
//	         as it takes
//	varint   a signed number, zig-zagged into a uvarint (binary.AppendVarint)
//	bytes    a uvarint length, then the bytes: strings too
//	fixed    a byte as it is; uint16 and uint32 big-endian
//
// Writing a field and reading it back gives the same bytes again: a number
// is read only in its shortest form, so that a state loaded saves as it
// was, and no two inputs decode alike.

// AppendUvarint appends v as a uvarint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendVarint appends v as a varint.
func AppendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// AppendBytes appends p with its length first.
func AppendBytes(b, p []byte) []byte { return append(binary.AppendUvarint(b, uint64(len(p))), p...) }

// AppendString appends s with its length first, as AppendBytes does.
func AppendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendUint16 appends v in two bytes, big-endian.
func AppendUint16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }

// AppendUint32 appends v in four bytes, big-endian.
func AppendUint32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

// A Reader reads the fields that the Append functions wrote, from bytes of
// a disk or a network that may be corrupt or hostile: it checks every
// length against the bytes left, refuses a number in any but its shortest
// form, and checks the bounds its caller gives, so that nothing it reads
// can make its caller index out of range, or allocate for more than the
// input holds.
//
// Its first error sticks: every read after it returns zero (and nil), so a
// decoder may read on and check Err once in a while, but must not index
// with what it reads before it checks. Its errors say what was wrong in
// the reader's words ("truncated: ...", "an overlong number: ...", "5
// keys, more than 4"); a decoder adds its own checks with Fail, and its
// context when it returns the error.
type Reader struct {
	b   []byte
	err error
}

// NewReader returns a Reader of b. The bytes it returns alias b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first error of r, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the number of bytes left.
func (r *Reader) Len() int { return len(r.b) }

// Fail makes fmt.Errorf(format, args...) the error of r, unless it has one
// already, and drops the bytes left.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	r.b = nil
}

// End is the error of r, or if bytes are left, one that says how many
// come after the last field read (what names it).
func (r *Reader) End(what string) error {
	if len(r.b) > 0 {
		r.Fail("%d bytes after %s", len(r.b), what)
	}
	return r.err
}

// Next reads the next n bytes as they are.
func (r *Reader) Next(n int) []byte {
	if uint(n) > uint(len(r.b)) {
		r.Fail("truncated: %d bytes wanted, %d left", n, len(r.b))
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

// Byte reads a byte.
func (r *Reader) Byte() byte {
	if b := r.b; len(b) > 0 {
		r.b = b[1:]
		return b[0]
	}
	r.Fail("truncated: 1 byte wanted, 0 left")
	return 0
}

// Uint16 reads what AppendUint16 wrote.
func (r *Reader) Uint16() uint16 {
	if p := r.Next(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

// Uint32 reads what AppendUint32 wrote.
func (r *Reader) Uint32() uint32 {
	if p := r.Next(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

// Uvarint reads what AppendUvarint wrote.
func (r *Reader) Uvarint() uint64 {
	if b := r.b; len(b) > 0 && b[0] < 0x80 { // one byte, as most of a state's are
		r.b = b[1:]
		return uint64(b[0])
	}
	return r.uvarint()
}

func (r *Reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	switch {
	case n == 0:
		r.Fail("truncated: a number unfinished at the end")
	case n < 0:
		r.Fail("a number of more than 64 bits")
	case n > 1 && r.b[n-1] == 0: // a last byte of 0 adds nothing but a byte
		r.Fail("an overlong number: %d in %d bytes", v, n)
	default:
		r.b = r.b[n:]
		return v
	}
	return 0
}

// Varint reads what AppendVarint wrote.
func (r *Reader) Varint() int64 {
	u := r.Uvarint()
	return int64(u>>1) ^ -int64(u&1) // as binary.Varint decodes it
}

// UvarintUpTo reads a uvarint of at most most; what says what it counts,
// for the error.
func (r *Reader) UvarintUpTo(most uint64, what string) uint64 {
	v := r.Uvarint()
	if v > most {
		r.Fail("%d %s, more than %d", v, what, most)
		return 0
	}
	return v
}

// Uvarint32 reads a uvarint that a uint32 holds.
func (r *Reader) Uvarint32() uint32 { return uint32(r.UvarintUpTo(math.MaxUint32, "as a count")) }

// Count reads how many of what follow, each in at least least bytes (1 or
// more): no more than the bytes left can hold, so that a caller may
// allocate for them.
func (r *Reader) Count(least int, what string) int {
	n := r.Uvarint()
	if n > uint64(len(r.b)/least) {
		r.Fail("%d %s in %d bytes", n, what, len(r.b))
		return 0
	}
	return int(n)
}

// Bytes reads what AppendBytes (or AppendString) wrote. They alias the
// Reader's bytes: string(r.Bytes()) is a string to keep.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if n > uint64(len(r.b)) {
		r.Fail("truncated: a length of %d, %d bytes left", n, len(r.b))
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}
