package throttle

import (
	"encoding/binary"
	"strings"
	"sync"
	"unsafe"
)

// store is the keyed state of one policy, whatever its algorithm. Strings
// passed in may alias the caller's buffers: a store clones what it keeps.
type store interface {
	// observe records one hit at `at` and reports whether it is the key's
	// first denied hit since its last allowed one (the crossing), marking
	// the key if mark is set. On a crossing, v is the key's verdict just
	// after the hit.
	observe(room, user string, h uint64, at int64, mark bool) (crossed bool, v Verdict)
	check(room, user string, h uint64, now int64) Verdict
	// active calls fn for each marked key that is still denied at now.
	active(now int64, fn func(room, user string, v Verdict, since int64))
	sweep(now int64) int
	stats() (keys int, evicted, expired uint64)
}

// table keeps the state of every key of one policy: a map from the key to
// an index, and at that index, in parallel slabs, the key's state (hot: read
// and written by every hit), its links in a doubly linked list from the most
// to the least recently observed key (warm: 8 bytes a key, so the neighbours
// a move to the front touches are usually in cache), the key itself (cold:
// needed only to evict) and the variable part of its state (ext, stride
// elements).
//
// Memory is bounded two ways. A key whose state is back at rest (the same
// as a key never seen) can be forgotten without changing any answer: each
// new key first evicts up to two such keys from the cold end of the list,
// and Sweep evicts them all; so the number of keys follows the live keys,
// not the events. And at most max keys are kept: a new key beyond that
// evicts the least recently observed one, at rest or not (evicted).
//
// One mutex guards a table, held briefly by each call. (An RWMutex would let
// checks run in parallel, but costs observe, by far the most frequent call,
// two more atomic operations.) Nothing allocates for a key already tracked.
type table[S, E any, K kernel[S, E]] struct {
	k      K
	scope  Scope
	hashed bool // the key includes a text hash (Repeat)
	// isDirect: the key is the user (keyUser) or the room (keyRoom) as
	// given, or "" (group); decided once, not by comparing scope strings.
	isDirect bool
	keyPart  uint8
	stride   int
	max      int

	mu         sync.Mutex
	index      map[string]int32
	states     []entry[S]
	links      []link
	keys       []string
	ext        []E
	head, tail int32 // most and least recently observed; -1 when empty
	free       int32 // free indexes, chained by links[i].next; -1 when none
	n          int   // keys tracked
	zero       []E   // the ext of a fresh key; never written
	evicted    uint64
	expired    uint64
}

type entry[S any] struct {
	since int64 // the alert mark: when the key crossed; noTime when not
	st    S
}

type link struct{ prev, next int32 }

const none = -1

// What a direct key is.
const (
	keyNone uint8 = iota
	keyUser
	keyRoom
)

func newTable[S, E any, K kernel[S, E]](k K, scope Scope, hashed bool, stride, max int) *table[S, E, K] {
	return &table[S, E, K]{
		k: k, scope: scope, hashed: hashed, stride: stride, max: max,
		isDirect: !hashed && scope != ScopeUserInRoom,
		keyPart:  map[Scope]uint8{ScopeUser: keyUser, ScopeRoom: keyRoom}[scope],
		index:    make(map[string]int32),
		head:     none, tail: none, free: none,
		zero: make([]E, stride),
	}
}

// keyBytes is the size of the stack buffer a key is built in; longer keys
// still work, through the heap.
const keyBytes = 320

// appendKey encodes the key of a message under a scope. user_in_room
// prefixes the room with its length, so that no two (room, user) pairs share
// a key; a text hash is appended as 8 bytes.
func appendKey(b []byte, scope Scope, hashed bool, room, user string, h uint64) []byte {
	switch scope {
	case ScopeUser:
		b = append(b, user...)
	case ScopeRoom:
		b = append(b, room...)
	case ScopeUserInRoom:
		b = binary.AppendUvarint(b, uint64(len(room)))
		b = append(b, room...)
		b = append(b, user...)
	}
	if hashed {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return b
}

// direct returns the map key of a message when it is one of the strings
// passed in (t.isDirect: scopes user, room and group, without a hash).
func (t *table[S, E, K]) direct(room, user string) string {
	switch t.keyPart {
	case keyUser:
		return user
	case keyRoom:
		return room
	}
	return ""
}

// built returns the map key of a message built in buf. The string aliases
// buf and is valid only while buf is: insert clones it.
func (t *table[S, E, K]) built(buf *[keyBytes]byte, room, user string, h uint64) string {
	b := appendKey(buf[:0], t.scope, t.hashed, room, user, h)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// splitKey is the inverse of appendKey, less the hash. Room or user is ""
// where the scope does not have it.
func splitKey(key string, scope Scope, hashed bool) (room, user string) {
	if hashed {
		key = key[:len(key)-8]
	}
	switch scope {
	case ScopeUser:
		return "", key
	case ScopeRoom:
		return key, ""
	case ScopeUserInRoom:
		n, w := binary.Uvarint([]byte(key[:min(len(key), binary.MaxVarintLen64)]))
		return key[w : w+int(n)], key[w+int(n):]
	}
	return "", ""
}

func (t *table[S, E, K]) extOf(i int32) []E {
	return t.ext[int(i)*t.stride : int(i+1)*t.stride]
}

func (t *table[S, E, K]) observe(room, user string, h uint64, at int64, mark bool) (crossed bool, v Verdict) {
	if t.isDirect {
		return t.observeKey(t.direct(room, user), at, mark)
	}
	var buf [keyBytes]byte
	return t.observeKey(t.built(&buf, room, user, h), at, mark)
}

func (t *table[S, E, K]) observeKey(key string, at int64, mark bool) (crossed bool, v Verdict) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.index[key]
	if !ok {
		i = t.insert(key, at)
	}
	e, ext := &t.states[i], t.extOf(i)
	switch {
	case t.k.hit(&e.st, ext, at):
		e.since = noTime
	case mark && e.since == noTime:
		e.since, crossed = at, true
		v = t.k.decide(&e.st, ext, at)
	}
	t.touch(i)
	return crossed, v
}

func (t *table[S, E, K]) check(room, user string, h uint64, now int64) Verdict {
	if t.isDirect {
		return t.checkKey(t.direct(room, user), now)
	}
	var buf [keyBytes]byte
	return t.checkKey(t.built(&buf, room, user, h), now)
}

func (t *table[S, E, K]) checkKey(key string, now int64) Verdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.index[key]; ok {
		return t.k.decide(&t.states[i].st, t.extOf(i), now)
	}
	fresh := t.k.fresh()
	return t.k.decide(&fresh, t.zero, now)
}

func (t *table[S, E, K]) active(now int64, fn func(room, user string, v Verdict, since int64)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := t.head; i != none; i = t.links[i].next {
		e := &t.states[i]
		if e.since == noTime {
			continue
		}
		if v := t.k.decide(&e.st, t.extOf(i), now); !v.Allowed {
			room, user := splitKey(t.keys[i], t.scope, t.hashed)
			fn(room, user, v, e.since)
		}
	}
}

// insert adds a fresh key and returns its index, evicting first.
func (t *table[S, E, K]) insert(key string, at int64) int32 {
	for range 2 {
		if t.tail == none || !t.k.atRest(&t.states[t.tail].st, t.extOf(t.tail), at) {
			break
		}
		t.remove(t.tail)
		t.expired++
	}
	if t.n >= t.max {
		t.remove(t.tail)
		t.evicted++
	}
	i := t.free
	if i != none {
		t.free = t.links[i].next
		copy(t.extOf(i), t.zero)
	} else {
		i = int32(len(t.states))
		t.states = append(t.states, entry[S]{})
		t.links = append(t.links, link{})
		t.keys = append(t.keys, "")
		t.ext = append(t.ext, t.zero...)
	}
	kept := strings.Clone(key)
	t.states[i] = entry[S]{since: noTime, st: t.k.fresh()}
	t.keys[i] = kept
	t.links[i] = link{prev: none, next: t.head}
	if t.head != none {
		t.links[t.head].prev = i
	} else {
		t.tail = i
	}
	t.head = i
	t.index[kept] = i
	t.n++
	return i
}

// touch moves index i to the head of the list.
func (t *table[S, E, K]) touch(i int32) {
	if t.head == i {
		return
	}
	l := &t.links[i]
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

// remove forgets the key at index i and puts i on the free list.
func (t *table[S, E, K]) remove(i int32) {
	l := t.links[i]
	delete(t.index, t.keys[i])
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
	t.keys[i] = ""
	t.links[i] = link{prev: none, next: t.free}
	t.free = i
	t.n--
}

// sweep forgets every key at rest at now, and gives memory back when most
// of the slabs are free.
func (t *table[S, E, K]) sweep(now int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	gone := 0
	for i := t.tail; i != none; {
		prev := t.links[i].prev
		if t.k.atRest(&t.states[i].st, t.extOf(i), now) {
			t.remove(i)
			gone++
		}
		i = prev
	}
	t.expired += uint64(gone)
	if len(t.states) >= 1024 && t.n < len(t.states)/4 {
		t.compact()
	}
	return gone
}

// compact copies the live keys into new, right-sized slabs and map (a Go
// map never shrinks), keeping their order.
func (t *table[S, E, K]) compact() {
	states := make([]entry[S], 0, 2*t.n)
	links := make([]link, 0, 2*t.n)
	keys := make([]string, 0, 2*t.n)
	ext := make([]E, 0, 2*t.n*t.stride)
	index := make(map[string]int32, t.n)
	for i := t.head; i != none; i = t.links[i].next {
		j := int32(len(states))
		states = append(states, t.states[i])
		links = append(links, link{prev: j - 1, next: j + 1})
		keys = append(keys, t.keys[i])
		ext = append(ext, t.extOf(i)...)
		index[t.keys[i]] = j
	}
	t.head, t.tail, t.free = none, none, none
	if n := int32(len(states)); n > 0 {
		links[n-1].next = none
		t.head, t.tail = 0, n-1
	}
	t.states, t.links, t.keys, t.ext, t.index = states, links, keys, ext, index
}

func (t *table[S, E, K]) stats() (keys int, evicted, expired uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.evicted, t.expired
}

// newStore returns the store of a valid policy with defaults filled in.
func newStore(p Policy, max int) store {
	hashed := p.Algorithm == AlgRepeat
	switch k := newKernel(p).(type) {
	case slidingKernel:
		return newTable[slidingState, uint32](k, p.Scope, hashed, int(k.n), max)
	case counterKernel:
		return newTable[counterState, struct{}](k, p.Scope, hashed, 0, max)
	case fixedKernel:
		return newTable[fixedState, struct{}](k, p.Scope, hashed, 0, max)
	case bucketKernel:
		return newTable[bucketState, struct{}](k, p.Scope, hashed, 0, max)
	case gcraKernel:
		return newTable[gcraState, struct{}](k, p.Scope, hashed, 0, max)
	case repeatKernel:
		return newTable[repeatState, int64](k, p.Scope, hashed, int(k.limit), max)
	}
	panic("throttle: unknown kernel")
}
