package snapshot

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// appendFields writes one of every field, with the values at their edges.
func appendFields(b []byte) []byte {
	for _, v := range []uint64{0, 1, 127, 128, 1<<14 - 1, 1 << 14, math.MaxUint32, math.MaxUint64} {
		b = AppendUvarint(b, v)
	}
	for _, v := range []int64{0, -1, 1, -64, 64, math.MinInt64, math.MaxInt64} {
		b = AppendVarint(b, v)
	}
	b = AppendString(b, "")
	b = AppendString(b, "é")
	b = AppendBytes(b, bytes.Repeat([]byte{0xff}, 200))
	b = append(b, 0x80)
	b = AppendUint16(b, 0xbeef)
	return AppendUint32(b, 0xdeadbeef)
}

// readFields reads what appendFields wrote, and says where it differs.
func readFields(t *testing.T, r *Reader) {
	t.Helper()
	for _, want := range []uint64{0, 1, 127, 128, 1<<14 - 1, 1 << 14, math.MaxUint32, math.MaxUint64} {
		if v := r.Uvarint(); v != want {
			t.Fatalf("uvarint %d, want %d (%v)", v, want, r.Err())
		}
	}
	for _, want := range []int64{0, -1, 1, -64, 64, math.MinInt64, math.MaxInt64} {
		if v := r.Varint(); v != want {
			t.Fatalf("varint %d, want %d (%v)", v, want, r.Err())
		}
	}
	if s := string(r.Bytes()); s != "" {
		t.Fatalf("%q, want the empty string", s)
	}
	if s := string(r.Bytes()); s != "é" {
		t.Fatalf("%q, want é", s)
	}
	if p := r.Bytes(); !bytes.Equal(p, bytes.Repeat([]byte{0xff}, 200)) || cap(p) != len(p) {
		t.Fatalf("%x (cap %d), want 200 bytes 0xff", p, cap(p))
	}
	if c, u16, u32 := r.Byte(), r.Uint16(), r.Uint32(); c != 0x80 || u16 != 0xbeef || u32 != 0xdeadbeef {
		t.Fatalf("%#x %#x %#x", c, u16, u32)
	}
	if err := r.End("the last field"); err != nil {
		t.Fatal(err)
	}
}

// Every field reads back as it was written, and every truncation of them
// is refused as such.
func TestFieldsRoundTrip(t *testing.T) {
	b := appendFields([]byte("prefix"))[len("prefix"):]
	readFields(t, NewReader(b))
	for n := range len(b) {
		r := NewReader(b[:n])
		readAll(r)
		if err := r.Err(); err == nil || !strings.HasPrefix(err.Error(), "truncated: ") {
			t.Fatalf("the first %d bytes of %d: %v, want truncated", n, len(b), err)
		}
	}
}

// readAll reads what appendFields wrote, whatever it finds.
func readAll(r *Reader) {
	for range 8 {
		r.Uvarint()
	}
	for range 7 {
		r.Varint()
	}
	r.Bytes()
	r.Bytes()
	r.Bytes()
	r.Byte()
	r.Uint16()
	r.Uint32()
}

// A Reader refuses what the Append functions never write, and what is
// past its caller's bounds, with an error that says what; the first one
// sticks, and every read after it returns zero.
func TestReaderRefuses(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		read func(r *Reader) any
		want string
	}{
		{"empty", nil, func(r *Reader) any { return r.Uvarint() }, "truncated: a number unfinished at the end"},
		{"unfinished", []byte{0x80, 0x80}, func(r *Reader) any { return r.Uvarint() }, "truncated: a number unfinished at the end"},
		{"overlong 0", []byte{0x80, 0}, func(r *Reader) any { return r.Uvarint() }, "an overlong number: 0 in 2 bytes"},
		{"overlong 1", []byte{0x81, 0x80, 0}, func(r *Reader) any { return r.Uvarint() }, "an overlong number: 1 in 3 bytes"},
		{"overlong varint", []byte{0x82, 0}, func(r *Reader) any { return r.Varint() }, "an overlong number: 2 in 2 bytes"},
		{"overlong length", []byte{0x81, 0, 'a'}, func(r *Reader) any { return r.Bytes() }, "an overlong number: 1 in 2 bytes"},
		{"65 bits", append(bytes.Repeat([]byte{0xff}, 9), 2), func(r *Reader) any { return r.Uvarint() }, "a number of more than 64 bits"},
		{"11 bytes", append(bytes.Repeat([]byte{0x80}, 10), 1), func(r *Reader) any { return r.Uvarint() }, "a number of more than 64 bits"},
		{"length", []byte{3, 'a', 'b'}, func(r *Reader) any { return r.Bytes() }, "truncated: a length of 3, 2 bytes left"},
		{"huge length", binary.AppendUvarint(nil, math.MaxUint64), func(r *Reader) any { return r.Bytes() }, "truncated: a length of 18446744073709551615, 0 bytes left"},
		{"byte", nil, func(r *Reader) any { return r.Byte() }, "truncated: 1 byte wanted, 0 left"},
		{"uint16", []byte{1}, func(r *Reader) any { return r.Uint16() }, "truncated: 2 bytes wanted, 1 left"},
		{"uint32", []byte{1, 2, 3}, func(r *Reader) any { return r.Uint32() }, "truncated: 4 bytes wanted, 3 left"},
		{"next", []byte{1, 2, 3}, func(r *Reader) any { return r.Next(16) }, "truncated: 16 bytes wanted, 3 left"},
		{"up to", []byte{11}, func(r *Reader) any { return r.UvarintUpTo(10, "keys") }, "11 keys, more than 10"},
		{"uint32 count", binary.AppendUvarint(nil, math.MaxUint32+1), func(r *Reader) any { return r.Uvarint32() }, "4294967296 as a count, more than 4294967295"},
		{"count", []byte{3, 1, 2, 3, 4, 5}, func(r *Reader) any { return r.Count(2, "rooms") }, "3 rooms in 5 bytes"},
		{"end", []byte{1, 2, 3}, func(r *Reader) any { r.Byte(); return r.End("the last room") }, "2 bytes after the last room"},
		{"fail", []byte{1, 2, 3}, func(r *Reader) any { r.Fail("flags %#x", 4); return r.Byte() }, "flags 0x4"},
	}
	for _, c := range cases {
		r := NewReader(c.in)
		got := c.read(r)
		if err := r.Err(); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		if _, isErr := got.(error); !isErr && !isZero(got) {
			t.Errorf("%s: read %v after the error", c.name, got)
		}
		first := r.Err()
		if r.Uvarint() != 0 || r.Bytes() != nil || r.Byte() != 0 || r.Len() != 0 || r.Err() != first || r.End("x") != first {
			t.Errorf("%s: reads after the error are not zero, or change it", c.name)
		}
	}
	// Good neighbours: the shortest forms at the edges are taken.
	for _, in := range [][]byte{{0}, {0x80, 1}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1}} {
		r := NewReader(in)
		r.Uvarint()
		if err := r.End("the number"); err != nil {
			t.Errorf("%x: %v", in, err)
		}
	}
	r := NewReader([]byte{2, 1, 2})
	if n := r.Count(1, "rooms"); n != 2 || r.Err() != nil {
		t.Errorf("count %d, %v: want 2", n, r.Err())
	}
}

func isZero(v any) bool {
	switch v := v.(type) {
	case []byte:
		return v == nil
	case int:
		return v == 0
	case uint16:
		return v == 0
	case uint32:
		return v == 0
	case uint64:
		return v == 0
	case int64:
		return v == 0
	case byte:
		return v == 0
	}
	return false
}
