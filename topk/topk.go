// Package topk ranks keys by a count that rises and falls, and answers "the
// k largest" without sorting all keys: a max-heap with lazy deletion.
//
// Counts here rise one event at a time and fall in bulk when a window's
// buckets expire. An indexed heap would have to sift every key whose count
// fell, at every expiry; instead a decrement touches nothing here, and the
// heap only hears of increments: each pushes a fresh entry carrying the new
// count. An entry is stale when a newer entry for the same key was pushed
// after it, or when the key's count has since fallen below the entry's.
// Stale entries are found and dealt with only when they surface at the top,
// where Top pops them (re-ranking the key at its current count if it still
// has one). So expiry is O(1) per key and Top(1) is O(log n) amortized: every
// entry is pushed once and popped at most once.
//
// What bounds the stale entries is compaction: when stale entries outnumber
// the live ones by staleFactor (the heap holds 1+staleFactor times the
// entries it kept at the last compaction, plus a little), the next push
// rebuilds it from one entry per live key in O(n). A rebuild follows at
// least staleFactor times as many pushes as it keeps entries, so it is O(1)
// amortized per push, and memory stays O(live keys), never O(events).
//
// Pushes are also coalesced: Push collects up to maxPending distinct items
// and flushes them together (Top flushes first), so a key that rises many
// times in between costs one entry.
//
// Order: more counts first, then the smaller name (bytewise), the order of
// every ranking in chatpulse. Nothing here is safe for concurrent use.
package topk

// Item is a key as the heap sees it. Embed one in the owner's per-key
// struct, which must not move: the heap keeps pointers to items.
type Item struct {
	Name    string
	Count   *int64 // the key's live count, owned and changed by the owner
	ver     uint32 // which of the item's entries speaks for it: the newest
	pending bool   // pushed since the heap last flushed
}

// entry is one push of an item: a snapshot of its count.
type entry struct {
	n   int64
	pre uint64 // the name's first 8 bytes, big-endian: most ties end here
	it  *Item
	ver uint32
}

// Heap is a max-heap of items by count with lazy deletion.
type Heap struct {
	es      []entry
	limit   int     // compact when the heap holds more entries than this
	pending []*Item // pushed but not yet in es
	taken   []entry // scratch for Top
}

const (
	// staleFactor is how many stale entries per live one the heap lets
	// pile up before it compacts: more costs memory, fewer costs time.
	staleFactor = 2
	// minLimit keeps tiny heaps from compacting at every other push.
	minLimit = 64
	// maxPending is how many items Push collects before it flushes them
	// into the heap. A busy key pushed many times in between costs one
	// entry, not one per increment.
	maxPending = 64
)

// Push records that it's count rose. Call it after every increase; a
// decrease needs no call.
func (h *Heap) Push(it *Item) {
	if it.pending {
		return
	}
	it.pending = true
	h.pending = append(h.pending, it)
	if len(h.pending) >= maxPending {
		h.flush()
	}
}

// flush pushes a fresh entry for every pending item, at its count now.
func (h *Heap) flush() {
	for _, it := range h.pending {
		it.pending = false
		if *it.Count == 0 {
			continue // fell to nothing since: its older entries are stale
		}
		if len(h.es) >= max(h.limit, minLimit) {
			h.compact()
		}
		it.ver++
		h.push(entry{n: *it.Count, pre: prefix(it.Name), ver: it.ver, it: it})
	}
	clear(h.pending)
	h.pending = h.pending[:0]
}

// prefix is the first 8 bytes of s, big-endian, zero-padded, so that
// comparing prefixes orders names as comparing the names would, up to ties.
func prefix(s string) uint64 {
	var p uint64
	for i := range 8 {
		p <<= 8
		if i < len(s) {
			p |= uint64(s[i])
		}
	}
	return p
}

// Top appends to dst the k items with the largest counts (count above
// zero), largest first, ties by the smaller name.
func (h *Heap) Top(k int, dst []*Item) []*Item {
	h.flush()
	start := len(dst)
	taken := h.taken[:0]
	for len(dst)-start < k && len(h.es) > 0 {
		e := h.pop()
		if e.ver != e.it.ver {
			continue // superseded by a newer push
		}
		if n := *e.it.Count; n != e.n || n == 0 {
			if n > 0 { // it fell since: re-rank it where it stands now
				e.it.ver++
				e.n, e.ver = n, e.it.ver
				h.push(e)
			}
			continue
		}
		taken = append(taken, e)
		dst = append(dst, e.it)
	}
	for _, e := range taken {
		h.push(e)
	}
	clear(taken)
	h.taken = taken[:0]
	return dst
}

// Len is the number of entries held, stale and pending ones included.
func (h *Heap) Len() int { return len(h.es) + len(h.pending) }

// compact rebuilds the heap from the newest entry of every live item, at
// its current count.
func (h *Heap) compact() {
	live := h.es[:0]
	for _, e := range h.es {
		if e.ver == e.it.ver && *e.it.Count > 0 {
			e.n = *e.it.Count
			live = append(live, e)
		}
	}
	clear(h.es[len(live):]) // let dropped items be collected
	h.es = live
	for i := len(h.es)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	h.limit = (1+staleFactor)*len(h.es) + minLimit
	if cap(h.es) > 4*h.limit { // the heap shrank a lot: give the memory back
		h.es = append([]entry(nil), h.es...)
	}
}

func less(a, b *entry) bool {
	if a.n != b.n {
		return a.n > b.n
	}
	if a.pre != b.pre {
		return a.pre < b.pre
	}
	return a.it.Name < b.it.Name
}

func (h *Heap) push(e entry) {
	h.es = append(h.es, e)
	h.up(len(h.es) - 1)
}

func (h *Heap) pop() entry {
	top := h.es[0]
	last := len(h.es) - 1
	h.es[0] = h.es[last]
	h.es[last] = entry{}
	h.es = h.es[:last]
	if last > 0 {
		h.down(0)
	}
	return top
}

func (h *Heap) up(i int) {
	e := h.es[i]
	for i > 0 {
		p := (i - 1) / 2
		if !less(&e, &h.es[p]) {
			break
		}
		h.es[i] = h.es[p]
		i = p
	}
	h.es[i] = e
}

func (h *Heap) down(i int) {
	n := len(h.es)
	e := h.es[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && less(&h.es[r], &h.es[c]) {
			c = r
		}
		if !less(&h.es[c], &e) {
			break
		}
		h.es[i] = h.es[c]
		i = c
	}
	h.es[i] = e
}
