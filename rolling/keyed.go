package rolling

// Tally is one key's share of a Keyed window: its count and the buckets it
// was seen in. Embed it in the caller's per-key struct; Keyed keeps pointers
// to keys, so the struct must not move.
//
// It is three words, because a tracked (room, user) pair holds one per
// window. The newest bucket is inline, its events being Count less those of
// the older buckets (most events land in the bucket the key was last seen
// in, and this keeps them off a second cache line); older buckets are in
// more, oldest first. A key seen in one bucket only never allocates.
type Tally struct {
	Count int64  // events of this key in the window
	last  int64  // the newest bucket with events, if Count > 0
	more  *older // the buckets before last with events; nil if none ever
}

// older are a key's buckets before its newest: cells[off:], oldest first,
// holding sum events.
type older struct {
	cells []cell
	off   int
	sum   int64
}

type cell struct {
	b int64 // bucket
	n int64 // events in it
}

// NumCells is the number of buckets the key has events in, and CellAt(i)
// the i-th of them, oldest first, with its count: what a snapshot saves of
// a key.
func (t *Tally) NumCells() int {
	n := len(t.older())
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
	return t.last, t.lastN()
}

// older are the cells before last that are still in the window.
func (t *Tally) older() []cell {
	if t.more == nil {
		return nil
	}
	return t.more.cells[t.more.off:]
}

// lastN is the number of events in the newest bucket.
func (t *Tally) lastN() int64 {
	if t.more == nil {
		return t.Count
	}
	return t.Count - t.more.sum
}

// push appends a cell, reusing the space of expired cells at the front once
// they are at least half the buffer, so a key that stays busy stops
// allocating and the copy is O(1) amortized.
func (t *Tally) push(c cell) {
	if t.more == nil {
		t.more = new(older)
	}
	m := t.more
	if len(m.cells) == cap(m.cells) && m.off >= len(m.cells)/2 && m.off > 0 {
		n := copy(m.cells, m.cells[m.off:])
		m.cells = m.cells[:n]
		m.off = 0
	}
	m.cells = append(m.cells, c)
	m.sum += c.n
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
		t.more.sum += k
		return false
	}
	if t.more == nil {
		t.more = new(older)
	}
	m := t.more
	i := m.off + lo
	m.cells = append(m.cells, cell{})
	copy(m.cells[i+1:], m.cells[i:])
	m.cells[i] = cell{b, k}
	m.sum += k
	return true
}

// dropOldest removes the oldest cell and returns it, leaving Count to the
// caller.
func (t *Tally) dropOldest() cell {
	if m := t.more; m != nil && m.off < len(m.cells) {
		c := m.cells[m.off]
		m.off++
		m.sum -= c.n
		if m.off == len(m.cells) {
			m.cells, m.off = m.cells[:0], 0
		}
		return c
	}
	return cell{t.last, t.lastN()}
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
			if t.more != nil && cap(t.more.cells) > keepCells { // a key with nothing here holds little here
				t.more = nil
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
	if k > 0 && t.Count > 0 && b == t.last { // the key's newest bucket: in the window
		t.Count += k
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
	switch {
	case t.Count == 0: // new in the window
		w.keys++
		t.Count, t.last = k, b
	case b > t.last:
		t.push(cell{t.last, t.lastN()})
		t.Count += k
		t.last = b
	case !t.insert(b, k):
		t.Count += k
		return nil
	default:
		t.Count += k
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
		case t.Count > 0 && t.last == s:
			v = t.lastN()
		}
		dst = append(dst, v)
	}
	return dst
}
