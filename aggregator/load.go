package aggregator

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
)

// LoadState replaces the state of an aggregator over the same windows with
// the one saved in b. It checks all of b as if hostile (the windows, every
// name, every bucket and count, no pair twice) and on any error leaves the
// aggregator empty, as New made it.
func (a *Aggregator) LoadState(b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset()
	if err := a.load(snapshot.NewReader(b)); err != nil {
		a.reset()
		return fmt.Errorf("aggregator: loading a state: %w", err)
	}
	return nil
}

// Reset forgets everything, as New made it.
func (a *Aggregator) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset()
}

func (a *Aggregator) reset() {
	specs := make([]rolling.Window, len(a.ws))
	for i, w := range a.ws {
		specs[i] = w.Window
	}
	a.init(specs)
}

// maxStateCount bounds a cell's count, and so every sum of them: far above
// any real traffic, far below overflow.
const maxStateCount = 1 << 40

func (a *Aggregator) load(r *snapshot.Reader) error {
	v := r.Byte()
	if r.Err() == nil && v != stateVersion && v != stateVersionCrowds && v != stateVersionOld {
		return fmt.Errorf("format version %d, not %d (or %d, %d)", v, stateVersion, stateVersionCrowds, stateVersionOld)
	}
	if n := r.Uvarint(); r.Err() == nil && n != uint64(len(a.ws)) {
		return fmt.Errorf("%d windows, not %d", n, len(a.ws))
	}
	for _, w := range a.ws {
		name, res, n := alias(r), r.Uvarint(), r.Uvarint()
		if r.Err() == nil && (name != w.Name || res != uint64(w.res) || n != uint64(w.n)) {
			return fmt.Errorf("window %q of %d buckets of %d ms, not %q of %d of %d", name, n, res, w.Name, w.n, w.res)
		}
	}
	clock := r.Varint()
	for i := range a.late {
		a.late[i] = r.Uvarint()
	}
	if clock != chat.Never {
		if clock < -1<<60 || clock > 1<<60 {
			return fmt.Errorf("clock %d out of range", clock)
		}
		a.advance(clock)
	}
	if v >= stateVersionCrowds {
		if err := a.loadCrowds(r); err != nil {
			return err
		}
	}
	if v >= stateVersion {
		if err := a.members.load(r, a.clock); err != nil {
			return err
		}
	}
	// Every room takes at least two bytes, every user two, every pair
	// three: no count below is believed past what b could hold.
	nrooms := uint64(r.Count(2, "rooms"))
	rooms := make([]*room, 0, nrooms)
	roomHash := make([]uint64, 0, nrooms)
	listedBy := make([]uint64, 0, nrooms) // pairs, by each room's count
	listed := 0                           // pairs, by the rooms' counts
	for range nrooms {
		name, n := alias(r), r.Uvarint()
		if r.Err() != nil {
			return r.Err()
		}
		if err := chat.CheckNameLen("room", name, chat.MaxForeignNameLen); err != nil {
			return err
		}
		if n == 0 || uint64(listed)+n > uint64(r.Len())/3 {
			return fmt.Errorf("room %q with %d pairs", name, n)
		}
		room := a.newRoom(name)
		if len(a.rooms) != len(rooms)+1 {
			return fmt.Errorf("room %q twice", name)
		}
		room.pairs = make([]*pair, 0, n) // filled to n below, no further
		room.snap = -1                   // the last user with a pair in it
		rooms = append(rooms, room)
		roomHash = append(roomHash, a.pairs.hashRoom(room.name))
		listedBy = append(listedBy, n)
		listed += int(n)
	}
	nusers, npairs := r.Uvarint(), r.Uvarint()
	if r.Err() != nil {
		return r.Err()
	}
	if npairs != uint64(listed) || nusers > npairs || (nusers == 0) != (npairs == 0) {
		return fmt.Errorf("%d users and %d pairs, %d listed by the rooms", nusers, npairs, listed)
	}
	if clock == chat.Never && npairs > 0 {
		return errors.New("pairs with no clock")
	}
	a.pairs.reserve(int(npairs))
	a.users = make(map[string]*user, nusers)
	rs := a.startRestore(rooms, roomHash)
	defer rs.stop()
	taken := make([]uint64, nrooms) // pairs read, per room
	for ui := range int(nusers) {
		name, n := alias(r), r.Uvarint()
		if r.Err() != nil {
			return r.Err()
		}
		if err := chat.CheckNameLen("user", name, chat.MaxForeignNameLen); err != nil {
			return err
		}
		if n == 0 || n > nrooms {
			return fmt.Errorf("user %q with %d pairs", name, n)
		}
		batch := rs.batch
		for range n {
			ri := r.Uvarint()
			if r.Err() != nil {
				return r.Err()
			}
			if ri >= nrooms {
				return fmt.Errorf("room %d of %d", ri, nrooms)
			}
			room := rooms[ri]
			if room.snap == ui {
				return fmt.Errorf("pair (%q, %q) twice", room.name, name)
			}
			if taken[ri] == listedBy[ri] {
				return fmt.Errorf("room %q with more pairs than listed", room.name)
			}
			room.snap = ui
			taken[ri]++
			k := int32(len(batch.rooms))
			batch.rooms = append(batch.rooms, int32(ri))
			cells := len(batch.cells)
			for i, w := range a.ws {
				if err := loadCells(r, w, func(b, n int64) { batch.cells = append(batch.cells, loadedCell{k, int32(i), b, n}) }); err != nil {
					return err
				}
			}
			if len(batch.cells) == cells {
				return fmt.Errorf("pair (%q, %q) with no events", room.name, name)
			}
		}
		rs.add(name)
	}
	if err := r.End("the last user"); err != nil {
		return err
	}
	named := rs.wait()
	if a.pairs.n != int(npairs) {
		return fmt.Errorf("%d pairs listed, %d found", npairs, a.pairs.n)
	}
	if named != int(nusers) {
		return fmt.Errorf("%d users listed, %d names", nusers, named)
	}
	a.peak.users = len(a.users)
	return nil
}

// loadCells reads a tally's cells in window w, handing each bucket and
// count to add, oldest first.
func loadCells(r *snapshot.Reader, w *window, add func(b, n int64)) error {
	cells := r.Uvarint()
	if r.Err() == nil && cells > uint64(w.n) {
		return fmt.Errorf("%d cells in a window of %d buckets", cells, w.n)
	}
	prev := int64(math.MaxInt64)
	for range cells {
		back, n := r.Uvarint(), r.Uvarint()
		if r.Err() != nil {
			return r.Err()
		}
		if back >= uint64(w.n) || int64(back) >= prev || n == 0 || n > maxStateCount {
			return fmt.Errorf("window %s: cell %d back, %d events", w.Name, back, n)
		}
		prev = int64(back)
		add(w.head-int64(back), int64(n))
	}
	return r.Err()
}

// loadCrowds reads the rooms' joins and leaves (format 3), with the clock
// already set.
func (a *Aggregator) loadCrowds(r *snapshot.Reader) error {
	// A crowd takes at least two bytes of name and two of cells per window.
	n := r.Count(2+2*len(a.ws), "crowds")
	if n > 0 && a.clock == chat.Never {
		return errors.New("joins or leaves with no clock")
	}
	for range n {
		name := alias(r)
		if r.Err() != nil {
			return r.Err()
		}
		if err := chat.CheckNameLen("room", name, chat.MaxForeignNameLen); err != nil {
			return err
		}
		if a.crowds[name] != nil {
			return fmt.Errorf("joins of room %q twice", name)
		}
		c := a.newCrowd(name)
		for _, w := range a.ws {
			for _, join := range []bool{true, false} {
				if err := loadCells(r, w, func(b, n int64) { a.addCrowd(w, c, join, b, n) }); err != nil {
					return err
				}
			}
		}
		if c.live == 0 {
			return fmt.Errorf("room %q with no joins or leaves", name)
		}
	}
	return r.Err()
}

// restoreCell adds n events of pair p in bucket b of window i, as n
// events would have, but for the heaps, which the next read rebuilds.
func (a *Aggregator) restoreCell(p *pair, i int, b, n int64) {
	w := a.ws[i]
	r, u := p.room, p.user
	pw, rw, uw := p.win(i), &r.w[i], u.win(i)
	w.total.Add(b, n)
	if pw.tally.Count == 0 {
		p.live++
		rw.distinct++
	}
	w.pairs.Add(pw, &pw.tally, b, n)
	if rw.tally.Count == 0 {
		r.live++
	}
	w.rooms.Add(rw, &rw.tally, b, n)
	if uw.count == 0 {
		u.live++
		w.users++
	}
	uw.count += n
}

// alias reads a string that shares r's bytes: one to compare, or to hand
// to newRoom or newUser, which copy it, never one to keep.
func alias(r *snapshot.Reader) string {
	p := r.Bytes()
	return unsafe.String(unsafe.SliceData(p), len(p))
}
