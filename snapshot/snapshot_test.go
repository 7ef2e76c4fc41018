package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
)

func testSnapshot() *Snapshot {
	return &Snapshot{
		Config:  "windows=1m,1h policies=... partitions=0",
		Stream:  "CHAT",
		Created: 1_764_489_600_123,
		Stages: []Stage{
			{Name: "standalone", Seq: 12345, Agg: []byte("aggregator state"), Thr: []byte("throttle state")},
			{Name: "users.7", Seq: 0, Agg: []byte{0, 1, 2}},
			{Name: "rooms.3", Seq: 1 << 60, Thr: []byte{9}},
		},
	}
}

// A snapshot decodes to what was appended, after any prefix, and its
// Size is an upper bound of its length.
func TestRoundTrip(t *testing.T) {
	s := testSnapshot()
	b := s.Append([]byte("prefix"))
	if n := len(b) - len("prefix"); n > s.Size() {
		t.Fatalf("%d bytes, Size says %d", n, s.Size())
	}
	got, err := Decode(b[len("prefix"):])
	if err != nil {
		t.Fatal(err)
	}
	// Decode leaves empty parts empty (nil), as Append wrote them.
	for i := range s.Stages {
		if len(s.Stages[i].Agg) == 0 {
			s.Stages[i].Agg = got.Stages[i].Agg
		}
		if len(s.Stages[i].Thr) == 0 {
			s.Stages[i].Thr = got.Stages[i].Thr
		}
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded %+v, want %+v", got, s)
	}
}

// Every change of a single byte, every truncation and every byte added is
// refused, with the error that says why.
func TestDecodeRefusesDamage(t *testing.T) {
	b := testSnapshot().Append(nil)
	for i := range b {
		for _, flip := range []byte{1, 0x80, 0xff} {
			c := bytes.Clone(b)
			c[i] ^= flip
			if _, err := Decode(c); err == nil {
				t.Fatalf("byte %d xor %#x: decoded", i, flip)
			} else if i >= len(magic) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d xor %#x: %v, want ErrCorrupt", i, flip, err)
			}
		}
	}
	for n := range len(b) {
		if _, err := Decode(b[:n]); err == nil {
			t.Fatalf("the first %d bytes of %d: decoded", n, len(b))
		}
	}
	if _, err := Decode(append(bytes.Clone(b), 0)); err == nil {
		t.Fatal("a byte added: decoded")
	}
}

// A snapshot of another version is refused as such, even with a good
// checksum.
func TestDecodeRefusesOtherVersions(t *testing.T) {
	b := testSnapshot().Append(nil)
	b = b[:len(b)-4]
	b[len(magic)+1]++ // the version's low byte
	b = withChecksum(b)
	if _, err := Decode(b); !errors.Is(err, ErrVersion) {
		t.Fatalf("got %v, want ErrVersion", err)
	}
	if _, err := Decode([]byte("not a snapshot at all, but long enough")); !errors.Is(err, ErrNotSnapshot) {
		t.Fatalf("got %v, want ErrNotSnapshot", err)
	}
}

// A number in any but its shortest form is refused, though it would read
// as the same number: a snapshot decodes only from the bytes Append
// writes.
func TestDecodeRefusesOverlongNumbers(t *testing.T) {
	b := (&Snapshot{Stream: "CHAT"}).Append(nil)
	config := len(magic) + 2 // the config's length, 0
	b = append(append(b[:config:config], 0x80, 0), b[config+1:len(b)-4]...)
	_, err := Decode(withChecksum(b))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "an overlong number: 0 in 2 bytes") {
		t.Fatalf("got %v, want ErrCorrupt for an overlong number", err)
	}
}

// withChecksum appends the checksum Append would to a body.
func withChecksum(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Decode never panics, and what it accepts is what Append writes: hostile
// bytes with a good checksum (the fuzzer's bodies get one added) decode
// only if they are a snapshot's exact encoding.
func FuzzDecode(f *testing.F) {
	f.Add(testSnapshot().Append(nil))
	f.Add((&Snapshot{}).Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, withChecksum(bytes.Clone(b))} {
			s, err := Decode(in)
			if err != nil {
				continue
			}
			if again := s.Append(nil); !bytes.Equal(again, in) {
				t.Fatalf("decoded %x as %+v, which encodes as %x", in, s, again)
			}
		}
	})
}
