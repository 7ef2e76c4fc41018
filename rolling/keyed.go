package rolling

import "unsafe"

// Tally is one key's share of a Keyed window: its count and the buckets it
// was seen in. Embed it in the caller's per-key struct; Keyed keeps pointers
// to keys, so the struct must not move.
//
// The newest bucket lives inline (most events land in the bucket the key
// was last seen in, and this keeps them off a second cache line); older
// buckets are in an array of their own, oldest first, from off, whose
// bookkeeping is inline too, so that reaching the oldest or the next cell
// is one cache miss. A key seen in one bucket only never allocates. Five
// words: a tracked (room, user) pair holds one per window.
type Tally struct {
	Count int64 // events of this key in the window
	last  cell  // the newest bucket with events; n == 0 iff Count == 0
	buf   *cell // cap cells; the older buckets are the n from off
	off   uint16
	n     uint16
	cap   uint16
}

// A window has at most MaxBuckets buckets, so a key has at most
// MaxBuckets-1 older cells, fewer than maxCells: a full array of maxCells
// has expired cells to make room with, and never doubles (room), so the
// counts fit in 16 bits.
const (
	maxCells = 1 << 15
	_        = uint16(maxCells - MaxBuckets) // fails to compile if MaxBuckets > maxCells
)

type cell struct {
	b int64 // bucket
	n int64 // events in it
}

// NumCells is the number of buckets the key has events in, and CellAt(i)
// the i-th of them, oldest first, with its count: what a snapshot saves of
// a key.
func (t *Tally) NumCells() int {
	n := int(t.n)
	if t.Count > 0 {
		n++
	}
	return n
}

// CellAt is the i-th bucket, oldest first, and its count; i < NumCells.
func (t *Tally) CellAt(i int) (b, n int64) {
	if older := t.older(); i < len(older) {
		return older[i].b, older[i].n
	}
	return t.last.b, t.last.n
}

// cells is the whole array, expired cells and free room included.
func (t *Tally) cells() []cell {
	if t.buf == nil {
		return nil
	}
	return unsafe.Slice(t.buf, t.cap)
}

// older are the cells before last that are still in the window.
func (t *Tally) older() []cell { return t.cells()[t.off : t.off+t.n] }

// room makes room for one more cell at the end: it moves the cells to the
// front once the expired ones before them are at least half the array (or
// the array is as large as it gets), so a key that stays busy stops
// allocating and the copy is O(1) amortized, and doubles the array
// otherwise.
func (t *Tally) room() {
	if t.off+t.n < t.cap {
		return
	}
	cs := t.cells()
	if t.off > 0 && (t.off >= t.cap/2 || t.cap == maxCells) {
		copy(cs, cs[t.off:])
		t.off = 0
		return
	}
	grown := make([]cell, max(2*int(t.cap), 4))
	copy(grown, cs[t.off:])
	t.buf, t.off, t.cap = &grown[0], 0, uint16(len(grown))
}

// push appends a cell.
func (t *Tally) push(c cell) {
	t.room()
	t.cells()[t.off+t.n] = c
	t.n++
}

// insert adds k events in bucket b, older than last; it reports whether
// that made a new cell.
func (t *Tally) insert(b, k int64) bool {
	cs := t.older()
	lo, hi := 0, len(cs)
	for lo < hi { // first cell with bucket >= b
		m := int(uint(lo+hi) >> 1)
		if cs[m].b < b {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(cs) && cs[lo].b == b {
		cs[lo].n += k
		return false
	}
	t.room()
	t.n++
	cs = t.older()
	copy(cs[lo+1:], cs[lo:])
	cs[lo] = cell{b, k}
	return true
}

// dropOldest removes the oldest cell and returns it.
func (t *Tally) dropOldest() cell {
	if t.n > 0 {
		c := t.cells()[t.off]
		t.off++
		if t.n--; t.n == 0 {
			t.off = 0
		}
		return c
	}
	c := t.last
	t.last = cell{}
	return c
}

// Keyed counts events per key over the last n buckets, sparsely: a key has
// one cell per bucket it was seen in, and ring[slot(b)] lists the keys with
// a cell in bucket b. When a bucket leaves the window each listed key drops
// its oldest cell (that very bucket, since cells are in order) and its count
// falls; the owner hears of it through fell. Memory is bounded by the (key,
// bucket) pairs inside the window; a key whose count reaches zero holds
// nothing here and is the owner's to forget, and a slot keeps the room a
// flood made it take only while the window still holds about that many
// keys.
//
// K is the owner's handle for a key (a pointer to its struct); tally finds
// the key's Tally from it.
type Keyed[K any] struct {
	ring   [][]K
	head   int64
	keys   int // keys with Count > 0
	tally  func(K) *Tally
	onFell func(key K, k int64)
	lost   []int64 // scratch for expire: what each key of a slot lost
}

// NewKeyed returns a keyed window of n buckets. fell, if not nil, is called
// after expiry lowered a key's count by k; the count may now be zero.
func NewKeyed[K any](n int, tally func(K) *Tally, fell func(key K, k int64)) *Keyed[K] {
	if n < 1 {
		panic("rolling: a window needs at least one bucket")
	}
	return &Keyed[K]{ring: make([][]K, n), head: never, tally: tally, onFell: fell}
}

// Keys is the number of distinct keys with events in the window as of the
// head. Call Advance first to read it as of a later bucket.
func (w *Keyed[K]) Keys() int { return w.keys }

// Advance moves the head to bucket b, expiring the buckets that leave the
// window. It is the only place where time moves.
func (w *Keyed[K]) Advance(b int64) {
	if b <= w.head {
		return
	}
	if w.head != never {
		// Bucket s reuses the slot of bucket s-n, which leaves the window; a
		// jump of a whole window or more expires every bucket held, once.
		n := int64(len(w.ring))
		expired := false
		for old := w.head - n + 1; old <= min(w.head, b-n); old++ {
			expired = w.expire(old) || expired
		}
		if expired && w.keys == 0 {
			// Nothing is left: no slot needs the room it once had.
			for i, keys := range w.ring {
				if cap(keys) > minSlot {
					w.ring[i] = nil
				}
			}
		}
	}
	w.head = b
}

const (
	// minSlot is the capacity a slot may keep whatever the window holds.
	minSlot = 64
	// keepCells is the capacity of older cells a key may keep while it has
	// nothing in the window: enough for a key that comes and goes to stop
	// allocating, too little to matter.
	keepCells = 4
)

// expire drops bucket old from every key listed in its slot, and reports
// whether there were any. It first takes the bucket from every key, then
// tells the owner: in a loop that only drops cells, the cache misses of
// reaching each key overlap, and the owner's work runs on keys already at
// hand.
func (w *Keyed[K]) expire(old int64) bool {
	i := slot(old, len(w.ring))
	keys := w.ring[i]
	lost := w.lost[:0]
	for _, key := range keys {
		t := w.tally(key)
		c := t.dropOldest() // == bucket old: older cells expired before it
		t.Count -= c.n
		if t.Count == 0 {
			w.keys--
			if t.cap > keepCells { // a key with nothing here holds little here
				t.buf, t.off, t.cap = nil, 0, 0
			}
		}
		lost = append(lost, c.n)
	}
	if w.onFell != nil {
		for j, key := range keys {
			w.onFell(key, lost[j])
		}
	}
	w.lost = lost[:0]
	clear(keys) // let forgotten keys be collected
	// The slot will list the keys of a bucket to come, about as many as the
	// one that left in steady state; after a flood, far fewer, so a slot
	// much larger than the whole window's keys gives its room back.
	if cap(keys) > 2*w.keys+minSlot {
		w.ring[i] = nil
	} else {
		w.ring[i] = keys[:0]
	}
	if cap(w.lost) > 2*w.keys+minSlot {
		w.lost = nil
	}
	return len(keys) > 0
}

// Add counts k > 0 events of key, whose Tally is t, in bucket b, like
// Counter.Add.
func (w *Keyed[K]) Add(key K, t *Tally, b int64, k int64) error {
	if k > 0 && t.Count > 0 && b == t.last.b { // the key's newest bucket: in the window
		t.Count += k
		t.last.n += k
		return nil
	}
	return w.add(key, t, b, k)
}

func (w *Keyed[K]) add(key K, t *Tally, b int64, k int64) error {
	if k < 1 {
		panic("rolling: Keyed.Add needs k > 0")
	}
	w.Advance(b)
	if b <= w.head-int64(len(w.ring)) {
		return ErrLate
	}
	t.Count += k
	switch {
	case t.Count == k: // new in the window
		w.keys++
		t.last = cell{b, k}
	case b > t.last.b:
		t.push(t.last)
		t.last = cell{b, k}
	case !t.insert(b, k):
		return nil
	}
	i := slot(b, len(w.ring))
	w.ring[i] = append(w.ring[i], key)
	return nil
}

// Series appends the key's per-bucket counts of the window as of the head,
// oldest first, n values, to dst.
func (w *Keyed[K]) Series(key K, dst []int64) []int64 {
	n := int64(len(w.ring))
	if w.head == never {
		return append(dst, make([]int64, n)...)
	}
	t := w.tally(key)
	older := t.older()
	for s := w.head - n + 1; s <= w.head; s++ {
		var v int64
		switch {
		case len(older) > 0 && older[0].b == s:
			v = older[0].n
			older = older[1:]
		case t.Count > 0 && t.last.b == s:
			v = t.last.n
		}
		dst = append(dst, v)
	}
	return dst
}
