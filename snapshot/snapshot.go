// Package snapshot is the format of chatpulse's saved state (contract
// section 9): a snapshot is the state of one or more stages, each at the
// stream sequence it covers, with what it was taken under.
//
// The state itself is the aggregator's and the throttle set's to write and
// read (their AppendState and LoadState); this package frames it: a magic
// line, a version, the configuration it was taken under (a snapshot of
// another is ignored), and a CRC-32C of everything, so that a corrupt or
// foreign object is refused before any of it is loaded. It never decides
// when to take one, where to keep it, or what to do without one: that is
// engine's Keeper.
package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Version is the version of the format; a snapshot of another is ignored.
const Version = 1

const magic = "chatpulse snapshot\n"

// A Snapshot is the state of some stages (a standalone instance has one;
// a group's partition, one per stage), each at the stream sequence it
// covers.
type Snapshot struct {
	// Config names what the state was taken under (windows, policies,
	// partitions): a snapshot is used only under the same.
	Config  string
	Stream  string
	Created int64 // Unix milliseconds
	Stages  []Stage
}

// A Stage is one reading of a stream's events: the state of its aggregator
// and its throttle policies once every event up to Seq was handled.
type Stage struct {
	Name string
	Seq  uint64
	Agg  []byte // the aggregator's AppendState, or empty
	Thr  []byte // the throttle set's AppendState, or empty
}

// Size is the size of what Append writes.
func (s *Snapshot) Size() int {
	n := len(magic) + 2 + 3*binary.MaxVarintLen64 + len(s.Config) + len(s.Stream) + 4
	for _, st := range s.Stages {
		n += 4*binary.MaxVarintLen64 + len(st.Name) + len(st.Agg) + len(st.Thr)
	}
	return n
}

// Append writes s: the magic line, the version, the fields, and a CRC-32C
// (Castagnoli) of all that comes before it.
func (s *Snapshot) Append(b []byte) []byte {
	start := len(b)
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint16(b, Version)
	b = appendString(b, s.Config)
	b = appendString(b, s.Stream)
	b = binary.AppendVarint(b, s.Created)
	b = binary.AppendUvarint(b, uint64(len(s.Stages)))
	for _, st := range s.Stages {
		b = appendString(b, st.Name)
		b = binary.AppendUvarint(b, st.Seq)
		b = appendString(b, string(st.Agg))
		b = appendString(b, string(st.Thr))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Errors of Decode.
var (
	ErrNotSnapshot = errors.New("not a chatpulse snapshot")
	ErrVersion     = errors.New("a snapshot of another version")
	ErrCorrupt     = errors.New("corrupt snapshot")
)

// Decode reads what Append wrote. It checks the checksum before anything
// else and refuses whatever does not add up; the stages' bytes alias b.
func Decode(b []byte) (*Snapshot, error) {
	if len(b) < len(magic)+2+4 || string(b[:len(magic)]) != magic {
		return nil, ErrNotSnapshot
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum", ErrCorrupt)
	}
	r := reader{b: body[len(magic):]}
	if v := r.uint16(); v != Version {
		return nil, fmt.Errorf("%w: version %d, this is %d", ErrVersion, v, Version)
	}
	s := &Snapshot{Config: r.string(), Stream: r.string(), Created: r.varint()}
	n := r.uvarint()
	if n > uint64(len(r.b)) { // every stage takes at least a byte
		return nil, fmt.Errorf("%w: %d stages", ErrCorrupt, n)
	}
	for range n {
		s.Stages = append(s.Stages, Stage{Name: r.string(), Seq: r.uvarint(), Agg: r.bytes(), Thr: r.bytes()})
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, cmpErr(r.err, "trailing bytes"))
	}
	return s, nil
}

func cmpErr(err error, otherwise string) any {
	if err != nil {
		return err
	}
	return otherwise
}

// reader reads the fields of a snapshot, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = errors.New(what)
	}
	r.b = nil
}

func (r *reader) uint16() uint16 {
	if len(r.b) < 2 {
		r.fail("short")
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad number")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("length past the end")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string { return string(r.bytes()) }
