// Package topk ranks keys by a count that rises and falls, and answers "the
// k largest" without sorting all keys: a max-heap with lazy deletion, a
// floor under which keys are not ranked, and no upkeep at all while nobody
// reads.
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
// Most pushes would never matter, and the heap skips them:
//
//   - A read asks for the top ten or a hundred of a hundred thousand users.
//     So the heap keeps a floor, and a key whose count is at or below it is
//     not pushed at all; the invariant is that every key above the floor
//     has an entry at least as large as its count. Compaction raises the
//     floor to keep about four times the largest k asked so far (at least
//     64 keys) above it, so only the busiest keys cost a push. When expiry
//     has lowered so many counts that fewer than k keys are left above the
//     floor, Top rebuilds the heap from every key, which its caller lists
//     (O(n), rare: it takes that many keys falling below a floor chosen with
//     room to spare).
//   - Most rankings are not read at all (a room nobody looks at, a window
//     no dashboard shows). A heap starts off, and while it is off, Push does
//     nothing; Top turns it on by rebuilding it from every key. A heap that
//     has taken more pushes since its last read than four times the keys it
//     was last rebuilt from turns itself off again and lets go of its
//     entries. So upkeep between reads never costs more than the rebuild it
//     saves, and the rebuild is paid for by those pushes and the events
//     that brought new keys: O(1) amortized per event either way.
//
// What bounds the stale entries is compaction: when stale entries outnumber
// the live ones by staleFactor (the heap holds 1+staleFactor times the
// entries it kept at the last compaction, plus a little), the next push
// rebuilds it from one entry per live key in O(n). A rebuild follows at
// least staleFactor times as many pushes as it keeps entries, so it is O(1)
// amortized per push, and memory stays O(live keys), never O(events). The
// owner also calls Fell whenever one of its keys falls to zero, so that
// keys that were forgotten (a flood of users that went quiet) do not stay
// reachable from stale entries: a heap whose keys are all gone lets go of
// everything.
//
// Pushes are also coalesced: Push collects up to maxPending distinct items
// and flushes them together (Top flushes first), so a key that rises many
// times in between costs one entry.
//
// Order: more counts first, then the smaller name (bytewise), the order of
// every ranking in chatpulse. Nothing here is safe for concurrent use.
package topk

import "iter"

// Item is a key as the heap sees it: the heap's own bookkeeping, two
// words less than a key's name and count, which the owner keeps and tells
// through Keys. Embed one in the owner's per-key struct, which must not
// move: the heap keeps pointers to items.
type Item struct {
	ver     uint32 // which of the item's entries speaks for it: the newest
	pending bool   // pushed since the heap last flushed
}

// Keys tells a heap its items' counts, kept by the owner, and names. A
// tracked (room, user) pair has an item in each window, so what the item
// does not hold, a million pairs do not hold either.
type Keys interface {
	Count(*Item) int64 // the key's live count
	Name(*Item) string
}

// entry is one push of an item: a snapshot of its count.
type entry struct {
	n   int64
	pre uint64 // the name's first 8 bytes, big-endian: most ties end here
	it  *Item
	ver uint32
}

// Heap is a max-heap of items by count with lazy deletion and a floor. The
// zero value is an empty heap, off until the first Top.
type Heap struct {
	es      []entry
	limit   int     // compact when the heap holds more entries than this
	floor   int64   // items counted at or below it need no entry
	want    int     // the largest k asked of Top: what the floor keeps room for
	on      bool    // kept up by Push; off, Top rebuilds it first
	idle    int     // pushes taken since the last Top
	built   int     // items with a count at the last rebuild: its cost
	pending []*Item // pushed but not yet in es
	taken   []entry // scratch for Top
	keys    Keys    // the owner's, as given to Top
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
	// keepFactor is how many keys, per key asked of Top, compaction keeps
	// above the floor: the room that expiry has to eat into before a read
	// must rebuild.
	keepFactor = 4
	// minKeep is the fewest keys compaction keeps above the floor.
	minKeep = 64
	// idleFactor is how many pushes per key of the last rebuild a heap
	// takes without a read before it turns off; minIdle keeps small heaps
	// from turning off and on all the time.
	idleFactor = 4
	minIdle    = 1024
)

// Push records that it's count rose to n. Call it after every increase; a
// decrease needs no call, but a fall to zero needs Fell.
func (h *Heap) Push(it *Item, n int64) {
	if h.on && !it.pending && n > h.floor {
		h.take(it)
	}
}

// take is Push for an item that needs an entry.
func (h *Heap) take(it *Item) {
	if h.idle++; h.idle > idleFactor*h.built+minIdle {
		h.reset() // nobody reads it: the next Top rebuilds
		return
	}
	it.pending = true
	h.pending = append(h.pending, it)
	if len(h.pending) >= maxPending {
		h.flush()
	}
}

// Fell records that one of the heap's items fell to zero, leaving live items
// with a count above zero. The heap drops its stale entries once they
// outnumber the live items, and everything once no item is live, so that
// it never keeps forgotten keys reachable.
func (h *Heap) Fell(live int) {
	switch {
	case live == 0:
		h.reset()
	case len(h.es) > (1+staleFactor)*live+minLimit:
		h.compact()
	}
}

// reset empties the heap, gives its memory back and turns it off.
func (h *Heap) reset() {
	for _, it := range h.pending {
		it.pending = false
	}
	*h = Heap{want: h.want, keys: h.keys}
}

// flush pushes a fresh entry for every pending item, at its count now.
func (h *Heap) flush() {
	for _, it := range h.pending {
		it.pending = false
		n := h.keys.Count(it)
		if n <= h.floor {
			continue // fell since, or a compaction raised the floor
		}
		if len(h.es) >= max(h.limit, minLimit) {
			h.compact()
		}
		it.ver++
		h.push(entry{n: n, pre: prefix(h.keys.Name(it)), ver: it.ver, it: it})
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
// zero), largest first, ties by the smaller name. keys tells their counts
// and names, the same for every call on a heap. all lists every item that
// may have a count (items at zero are skipped); Top walks it only when the
// heap is off or the floor hides items it needs.
func (h *Heap) Top(k int, dst []*Item, keys Keys, all iter.Seq[*Item]) []*Item {
	h.keys = keys
	h.want = max(h.want, k)
	h.idle = 0
	if !h.on {
		h.rebuild(all)
		h.on = true
	}
	h.flush()
	start := len(dst)
	dst = h.top(k, dst)
	if len(dst)-start < k && h.floor > 0 {
		h.rebuild(all)
		dst = h.top(k, dst[:start])
	}
	return dst
}

// top pops up to k items above the floor, pushing back what it took.
func (h *Heap) top(k int, dst []*Item) []*Item {
	start := len(dst)
	taken := h.taken[:0]
	for len(dst)-start < k && len(h.es) > 0 {
		e := h.pop()
		if e.ver != e.it.ver {
			continue // superseded by a newer push
		}
		n := h.keys.Count(e.it)
		if n <= h.floor {
			continue // it needs no entry now; if it rises, it is pushed
		}
		if n != e.n { // it fell since: re-rank it where it stands now
			e.it.ver++
			e.n, e.ver = n, e.it.ver
			h.push(e)
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
