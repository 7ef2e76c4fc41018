package topk

import "iter"

// The heap proper: rebuilding, compaction (where the floor rises) and the
// sift operations.

// rebuild drops every entry and pushes one per item of all with a count,
// from floor zero up to where settle puts it.
func (h *Heap) rebuild(all iter.Seq[*Item]) {
	clear(h.es)
	h.es, h.floor = h.es[:0], 0
	for it := range all {
		if n := h.keys.Count(it); n > 0 {
			it.ver++
			h.es = append(h.es, entry{n: n, pre: prefix(h.keys.Name(it)), ver: it.ver, it: it})
		}
	}
	h.built = len(h.es)
	h.settle()
}

// compact rebuilds the heap from the newest entry of every item above the
// floor, at its current count.
func (h *Heap) compact() {
	live := h.keep(h.es, h.floor)
	clear(h.es[len(live):]) // let dropped items be collected
	h.es = live
	h.settle()
}

// settle raises the floor if far more items are above it than reads need,
// dropping the entries it leaves under, and restores the heap order over
// entries whose counts are current.
func (h *Heap) settle() {
	if keep := keepFactor * max(h.want, minKeep/keepFactor); len(h.es) > 2*keep {
		// The keep-th largest count becomes the floor's successor: keys
		// tied with it stay, so at least keep keys are above the floor.
		h.floor = max(h.floor, kth(h.es, keep)-1)
		n := len(h.es)
		h.es = above(h.es, h.floor)
		clear(h.es[len(h.es):n])
	}
	for i := len(h.es)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	h.limit = (1+staleFactor)*len(h.es) + minLimit
	if cap(h.es) > 4*h.limit { // the heap shrank a lot: give the memory back
		h.es = append([]entry(nil), h.es...)
	}
}

// above filters es in place to the entries counted above floor.
func above(es []entry, floor int64) []entry {
	kept := es[:0]
	for _, e := range es {
		if e.n > floor {
			kept = append(kept, e)
		}
	}
	return kept
}

// keep filters es in place to the current entries of items counted above
// floor, refreshing their counts.
func (h *Heap) keep(es []entry, floor int64) []entry {
	live := es[:0]
	for _, e := range es {
		if n := h.keys.Count(e.it); e.ver == e.it.ver && n > floor {
			e.n = n
			live = append(live, e)
		}
	}
	return live
}

// kth reorders es and returns the k-th largest count among them (1-based,
// k <= len(es)): Hoare's selection, O(n) expected.
func kth(es []entry, k int) int64 {
	lo, hi := 0, len(es)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		p := median(es[lo].n, es[mid].n, es[hi].n)
		i, j := lo, hi
		for i <= j { // larger counts to the left
			for es[i].n > p {
				i++
			}
			for es[j].n < p {
				j--
			}
			if i <= j {
				es[i], es[j] = es[j], es[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default: // between the halves: equal to the pivot
			return es[k-1].n
		}
	}
	return es[k-1].n
}

func median(a, b, c int64) int64 { return max(min(a, b), min(max(a, b), c)) }

func (h *Heap) less(a, b *entry) bool {
	if a.n != b.n {
		return a.n > b.n
	}
	if a.pre != b.pre {
		return a.pre < b.pre
	}
	return h.keys.Name(a.it) < h.keys.Name(b.it)
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
		if !h.less(&e, &h.es[p]) {
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
		if r := c + 1; r < n && h.less(&h.es[r], &h.es[c]) {
			c = r
		}
		if !h.less(&h.es[c], &e) {
			break
		}
		h.es[i] = h.es[c]
		i = c
	}
	h.es[i] = e
}
