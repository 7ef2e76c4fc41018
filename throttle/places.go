package throttle

import "github.com/chatpulse/chatpulse/chat"

// A table's places: how a key gets one (insert, evicting first; add), moves
// to the front of the recency list (touch), gives it back to the free list
// (remove), and how the slabs grow (grow) and shrink (compact).

// insert adds k, fresh, and returns its place, evicting first.
func (t *table[S, E, K]) insert(k *key, at int64) int32 {
	for range 2 {
		if t.tail == none || !t.atRest(t.tail, at) {
			break
		}
		t.remove(t.tail)
		t.expired++
	}
	if t.n >= t.max {
		t.remove(t.tail)
		t.evicted++
	}
	return t.add(k)
}

// add puts k, fresh, at the head of the list, in a free place or a new one,
// and returns the place.
func (t *table[S, E, K]) add(k *key) int32 {
	i := t.free
	if i != none {
		t.free = t.links[i].next
		copy(t.extOf(i), t.zero)
	} else {
		i = int32(len(t.states))
		t.states = append(grow(t.states, 1), entry[S]{})
		t.links = append(grow(t.links, 1), link{})
		if t.long != nil {
			t.long = append(grow(t.long, 1), "")
		}
		t.ext = append(grow(t.ext, t.stride), t.zero...)
	}
	e := &t.states[i]
	*e = entry[S]{since: chat.Never, st: t.k.fresh()}
	t.setKey(e, i, k)
	t.moves++
	t.links[i] = link{prev: none, next: t.head, moved: t.moves}
	if t.head != none {
		t.links[t.head].prev = i
	} else {
		t.tail = i
	}
	t.head = i
	t.index.insert(k.hash, i)
	t.n++
	return i
}

// grow makes room for n more in a slab, doubling its capacity when full:
// append alone would add only a quarter once the slab is large, and so copy
// it four times as much while a table fills up.
func grow[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	return append(make([]T, 0, max(2*cap(s), len(s)+n, 16)), s...)
}

// touch moves place i to the head of the list, unless it is in the newer
// half of the list already: fewer than n/2 keys have been put at the head
// since it was, so fewer than n/2 are in front of it. A move writes the
// links of three other keys, cache misses every hit of a key already
// tracked would pay; this way the busy keys, which most hits are for, stay
// where they are, and the list is nearly in order of last observation: a
// key is at the cold end only once at least half the keys tracked have
// been observed after it (exactly in order, as a list moving every key,
// while fewer than four keys are tracked).
func (t *table[S, E, K]) touch(i int32) {
	l := &t.links[i]
	if t.head == i || t.moves-l.moved < uint64(t.n/2) {
		return
	}
	t.moves++
	l.moved = t.moves
	t.links[l.prev].next = l.next
	if l.next != none {
		t.links[l.next].prev = l.prev
	} else {
		t.tail = l.prev
	}
	l.prev, l.next = none, t.head
	t.links[t.head].prev = i
	t.head = i
}

// remove forgets the key at place i and puts i on the free list.
func (t *table[S, E, K]) remove(i int32) {
	t.index.remove(t.hashOf(i), i)
	e := &t.states[i]
	if t.hashed && e.klen == hasNames {
		delete(t.names, i)
	}
	if t.extra != nil {
		delete(t.extra, i)
	}
	l := t.links[i]
	if l.prev != none {
		t.links[l.prev].next = l.next
	} else {
		t.head = l.next
	}
	if l.next != none {
		t.links[l.next].prev = l.prev
	} else {
		t.tail = l.prev
	}
	if e.klen == longName {
		t.long[i] = ""
	}
	t.links[i] = link{prev: none, next: t.free}
	t.free = i
	t.n--
}

// compact copies the live keys into new, right-sized slabs and index,
// keeping their order.
func (t *table[S, E, K]) compact() {
	states := make([]entry[S], 0, 2*t.n)
	links := make([]link, 0, 2*t.n)
	var long []string
	if t.long != nil {
		long = make([]string, 0, 2*t.n)
	}
	ext := make([]E, 0, 2*t.n*t.stride)
	idx := newIndex(2 * t.n)
	var marked map[int32]names
	if len(t.names) > 0 {
		marked = make(map[int32]names, len(t.names))
	}
	var extra map[int32]*keyExtra
	if len(t.extra) > 0 {
		extra = make(map[int32]*keyExtra, len(t.extra))
	}
	for i := t.head; i != none; i = t.links[i].next {
		j := int32(len(states))
		states = append(states, t.states[i])
		links = append(links, link{prev: j - 1, next: j + 1, moved: t.links[i].moved})
		if t.long != nil {
			long = append(long, t.long[i])
		}
		ext = append(ext, t.extOf(i)...)
		idx.insert(t.hashOf(i), j)
		if nm, ok := t.names[i]; ok {
			marked[j] = nm
		}
		if x := t.extraAt(i); x != nil {
			extra[j] = x
		}
	}
	t.head, t.tail, t.free = none, none, none
	if n := int32(len(states)); n > 0 {
		links[n-1].next = none
		t.head, t.tail = 0, n-1
	}
	t.states, t.links, t.long, t.ext, t.index, t.names, t.extra = states, links, long, ext, idx, marked, extra
}
