// Package snapshot is the format of chatpulse's saved state (contract
// section 9): a snapshot is the state of one or more stages, each at the
// stream sequence it covers, with what it was taken under.
//
// It owns two things. The framing (Snapshot, Append, Decode): a magic
// line, a version, the configuration it was taken under (a snapshot of
// another is ignored), and a CRC-32C of everything, so that a corrupt or
// foreign object is refused before any of it is loaded. And the dialect
// that every field is written in, the framing's and the stages' alike
// (the Append functions and the Reader, in fields.go): the aggregator's
// and the throttle set's AppendState and LoadState write and read their
// states with it, and what a state holds is theirs to say. So there is
// one reader of the file, with one strictness and one set of error words.
//
// It imports nothing of chatpulse's, so that any package may use it. It
// never decides when to take a snapshot, where to keep it, or what to do
// without one: that is engine's Keeper.
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
	b = AppendUint16(b, Version)
	b = AppendString(b, s.Config)
	b = AppendString(b, s.Stream)
	b = AppendVarint(b, s.Created)
	b = AppendUvarint(b, uint64(len(s.Stages)))
	for _, st := range s.Stages {
		b = AppendString(b, st.Name)
		b = AppendUvarint(b, st.Seq)
		b = AppendBytes(b, st.Agg)
		b = AppendBytes(b, st.Thr)
	}
	return AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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
	body := b[:len(b)-4]
	if sum := NewReader(b[len(body):]).Uint32(); crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: checksum", ErrCorrupt)
	}
	r := NewReader(body[len(magic):])
	if v := r.Uint16(); v != Version {
		return nil, fmt.Errorf("%w: version %d, this is %d", ErrVersion, v, Version)
	}
	s := &Snapshot{Config: string(r.Bytes()), Stream: string(r.Bytes()), Created: r.Varint()}
	n := r.Count(4, "stages") // a name, a sequence and two parts: 4 bytes at least
	for range n {
		s.Stages = append(s.Stages, Stage{Name: string(r.Bytes()), Seq: r.Uvarint(), Agg: r.Bytes(), Thr: r.Bytes()})
	}
	if err := r.End("the last stage"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return s, nil
}
