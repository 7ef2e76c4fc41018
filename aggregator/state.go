package aggregator

import (
	"errors"
	"unsafe"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
)

// Saving and loading the state (docs/contract.md section 9). What counts is each
// (room, user) pair's events per bucket in each window: every other number
// follows from those (a room's cells are the sum of its pairs', a user's
// count the sum of its pairs', the total the sum of all), and the heaps are
// rebuilt by the next read. So the state is the clock and, per pair, its
// cells; LoadState adds them back as events would, and every answer after
// it is what the saved aggregator would have given.
//
// A state is written copy-on-write, so that taking one does not stop
// ingest for as long as it takes to walk a million users: StartState
// notes the instant (the clock, each window's head, the late counts) and
// Finish then writes the users a chunk at a time, letting events in
// between. An event that is about to change a user not written yet has the
// user written first, as it was; users made since the start are not
// written at all. So every user is written as it was at the start, but
// for one thing: cells that expired meanwhile may be missing. That changes
// no answer after a load, because the stream read again after the state
// brings the clock at least as far as it had come, which expires them
// again (and a pair left with no cells is not written, as one that had
// been forgotten).
//
// Joins and leaves (crowds.go) are kept per room, not per pair, and rooms
// are few: StartState writes them all at once, under the lock. So it does
// the last membership of each (room, user) (members.go): one small entry
// each, of those that joined or left within two largest windows.

// stateVersion is the format written; LoadState also reads format 3, of
// before memberships were kept (a state that knows none), and format 2,
// of before joins and leaves were counted (docs/contract.md section 12),
// as a state without any.
const (
	stateVersion       = 4
	stateVersionCrowds = 3
	stateVersionOld    = 2
)

// The layout of a state:
//
//	version byte
//	uvarint windows; per window: name, resolution ms, buckets (a check)
//	varint clock (Never: nothing seen)
//	uvarint late events, per window
//	uvarint crowds (format 3 on); per crowd: name, then per window: the
//	  joins' cells, the leaves' cells, each as a pair's below
//	the memberships (format 4): uvarint rooms; per room: name, uvarint
//	  members; per member: name, varint ts, byte 1 (join) or 0 (leave)
//	uvarint rooms; per room: name, uvarint pairs
//	uvarint users, uvarint pairs
//	per user: name, uvarint pairs; per pair: uvarint room's number, then
//	  per window: uvarint cells; per cell, oldest first: uvarint
//	  head-bucket, uvarint count
//
// Numbers and strings are written in package snapshot's dialect (a string
// is a uvarint length and the bytes), and read back with its Reader, which
// checks every length and refuses a number in any but its shortest form.
// Rooms are few and pairs many, so a pair names its room by number
// (numbered as they are first written); pairs come grouped by user, so a
// user's name is written, and looked up on loading, once.

// A StateWriter is a state being written: see StartState.
type StateWriter struct {
	a      *Aggregator
	epoch  uint32  // users with this mark are written, or newer than the state
	heads  []int64 // each window's head at the start
	head   []byte  // what comes before the rooms
	body   []byte  // the users written so far
	rooms  []*room // by number
	counts []int   // pairs written, per room number
	users  int
	pairs  int
	sink   uintptr // where writeAll's early loads go
}

// StartState starts writing the aggregator's state as it is now, and
// returns at once (it takes time in the rooms, with their joins and
// leaves, not the users); Finish
// writes it. Between the two the aggregator goes on as usual, and a
// caller that must take the state of one instant (the stream sequence a
// snapshot covers) stops feeding it only until StartState returns. One
// state is written at a time: starting another, or loading or resetting
// the aggregator, makes the Finish of this one fail.
func (a *Aggregator) StartState() *StateWriter {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.clock != chat.Never {
		a.members.sweepAt = chat.Never // a state holds no membership too old to matter
		a.advance(a.clock)             // a read moves only its own window: bring all to the clock
	}
	a.epoch++
	sw := &StateWriter{a: a, epoch: a.epoch}
	b := append([]byte(nil), stateVersion)
	b = snapshot.AppendUvarint(b, uint64(len(a.ws)))
	for _, w := range a.ws {
		b = snapshot.AppendString(b, w.Name)
		b = snapshot.AppendUvarint(b, uint64(w.res))
		b = snapshot.AppendUvarint(b, uint64(w.n))
		sw.heads = append(sw.heads, w.head)
	}
	b = snapshot.AppendVarint(b, a.clock)
	for _, n := range a.late {
		b = snapshot.AppendUvarint(b, n)
	}
	b = snapshot.AppendUvarint(b, uint64(len(a.crowds)))
	for _, c := range a.crowds {
		b = snapshot.AppendString(b, c.name)
		for i, head := range sw.heads {
			b = appendCells(b, head, &c.w[i].joins)
			b = appendCells(b, head, &c.w[i].leaves)
		}
	}
	b = a.members.append(b)
	sw.head = b
	sw.body = make([]byte, 0, a.pairs.n*(2+6*len(a.ws))+len(a.users)*16) // about what it takes
	a.cow = sw
	return sw
}

// ErrStateAbandoned is Finish's error when the state could not be
// finished: another was started, or the aggregator was loaded or reset.
var ErrStateAbandoned = errors.New("aggregator: the state was abandoned")

// stateChunk is how many users Finish writes before it lets events in;
// stateYield, if set (by tests), runs each time it does.
var (
	stateChunk = 512
	stateYield func()
)

// Finish writes every user not written yet, holding the aggregator's lock
// for a chunk of users at a time, and returns the state as it was when
// StartState was called.
func (sw *StateWriter) Finish() ([]byte, error) {
	a := sw.a
	a.mu.Lock()
	if a.cow != sw {
		a.mu.Unlock()
		return nil, ErrStateAbandoned
	}
	chunk := make([]*user, 0, stateChunk)
	for _, u := range a.users {
		if chunk = append(chunk, u); len(chunk) == cap(chunk) {
			sw.writeAll(chunk)
			chunk = chunk[:0]
			a.mu.Unlock()
			if stateYield != nil {
				stateYield()
			}
			a.mu.Lock()
			if a.cow != sw {
				a.mu.Unlock()
				return nil, ErrStateAbandoned
			}
		}
	}
	sw.writeAll(chunk)
	clear(chunk)
	a.cow = nil
	a.mu.Unlock()

	b := sw.head
	b = snapshot.AppendUvarint(b, uint64(len(sw.rooms)))
	for i, r := range sw.rooms {
		b = snapshot.AppendString(b, r.name)
		b = snapshot.AppendUvarint(b, uint64(sw.counts[i]))
	}
	b = snapshot.AppendUvarint(b, uint64(sw.users))
	b = snapshot.AppendUvarint(b, uint64(sw.pairs))
	return append(b, sw.body...), nil
}

// AppendState appends the aggregator's state to b: StartState and Finish
// at once.
func (a *Aggregator) AppendState(b []byte) []byte {
	state, err := a.StartState().Finish()
	if err != nil {
		panic("aggregator: a state abandoned while AppendState wrote it")
	}
	return append(b, state...)
}

// writeAll writes those of users not written yet, with the aggregator's lock
// held throughout. A state's time is cache misses: each user, its list of
// pairs and each pair is one, and a million users lie all over the heap.
// Written one after another, each waits for the last; so writeAll first
// reaches every list, then every pair (and the lines of its windows), in
// loops that only load, whose misses the processor overlaps, and writes
// them from the cache after. It is about twice as fast as writing them
// one by one (BenchmarkSnapshotPause, encode-ms).
func (sw *StateWriter) writeAll(users []*user) {
	var sink uintptr
	for _, u := range users {
		if u.written != sw.epoch && len(u.pairs) > 0 {
			sink += uintptr(unsafe.Pointer(u.pairs[0]))
		}
	}
	for _, u := range users {
		if u.written == sw.epoch {
			continue
		}
		for _, p := range u.pairs {
			sink += uintptr(p.live)
			for i := range sw.heads {
				sink += uintptr(p.win(i).tally.Count)
			}
		}
	}
	sw.sink = sink
	for _, u := range users {
		if u.written != sw.epoch {
			sw.write(u)
		}
	}
}

// write writes user u, and marks it written. Only pairs with events are
// written: a pair linked to u since the start has none yet.
func (sw *StateWriter) write(u *user) {
	u.written = sw.epoch
	n := 0
	for _, p := range u.pairs {
		if p.live > 0 {
			n++
		}
	}
	if n == 0 {
		return
	}
	sw.users++
	sw.pairs += n
	b := snapshot.AppendString(sw.body, u.name)
	b = snapshot.AppendUvarint(b, uint64(n))
	for _, p := range u.pairs {
		if p.live > 0 {
			b = sw.appendPair(b, p)
		}
	}
	sw.body = b
}

// appendPair writes a pair: its room's number, its cells.
func (sw *StateWriter) appendPair(b []byte, p *pair) []byte {
	r := p.room
	if r.numbered != sw.epoch {
		r.numbered, r.snap = sw.epoch, len(sw.rooms)
		sw.rooms = append(sw.rooms, r)
		sw.counts = append(sw.counts, 0)
	}
	sw.counts[r.snap]++
	b = snapshot.AppendUvarint(b, uint64(r.snap))
	for i, head := range sw.heads {
		b = appendCells(b, head, &p.win(i).tally)
	}
	return b
}

// appendCells writes a tally's cells in a window whose head is head.
func appendCells(b []byte, head int64, t *rolling.Tally) []byte {
	n := t.NumCells()
	b = snapshot.AppendUvarint(b, uint64(n))
	for j := range n {
		bucket, count := t.CellAt(j)
		b = snapshot.AppendUvarint(b, uint64(head-bucket))
		b = snapshot.AppendUvarint(b, uint64(count))
	}
	return b
}
