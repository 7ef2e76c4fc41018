package throttle

import (
	"strings"
	"sync"
	"unsafe"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/measure"
	"github.com/chatpulse/chatpulse/snapshot"
)

// store is the keyed state of one policy, whatever its algorithm. Strings
// passed in may alias the caller's buffers: a store clones what it keeps.
type store interface {
	// observe records one hit at m.at and returns the crossing if it is
	// the key's first denied hit since its last allowed one (j 0; -1:
	// none), marking the key if mark is set. A crossing's count and limit
	// are those of the key's verdict just after the hit.
	observe(m msg, mark bool) crossing
	// observeAll is observe for ms[j], for each j of sel in turn, under
	// one taking of the lock; it appends the crossings to out.
	observeAll(ms []msg, sel []int32, mark bool, out *[]crossing)
	check(m msg) Verdict
	// active calls fn for each marked key that is still denied at now,
	// with the end of its penalty (0: none).
	active(now int64, fn func(room, user string, v Verdict, since, until int64))
	sweep(now int64) int
	stats() (keys int, evicted, expired uint64)
	// copyState copies the keys and counters, and returns whether their
	// encoding needs format 2 (extras), and what appends them to a saved
	// state in a format (see Set.AppendState), which may run later, from
	// any goroutine.
	copyState() (extended bool, appendTo func(b []byte, format byte) []byte)
	// loadState returns a new store of the same policy, with key hk,
	// holding what r reads: what appendState wrote in format, with keys
	// marked only if mark.
	loadState(r *snapshot.Reader, hk *hashKey, mark bool, format byte) (store, error)
	// addCounts adds to the counts of evicted and expired keys those of
	// an earlier store of the policy (Set.Reconfigure).
	addCounts(evicted, expired uint64)
	// setRule sets how the keys' extras are kept (the policy's window,
	// ids and penalty): when the store is made, and when its policy is
	// reconfigured.
	setRule(r extraRule)
	// remembersIDs reports whether a consuming check has come to the
	// store (or to the one whose state it loaded).
	remembersIDs() bool
	consumer
}

// A crossing is one that observeAll found: of the key of message j.
type crossing struct {
	j            int   // the Set makes it the index in the batch
	policy       int32 // filled in by the Set
	count, limit int64
	until        int64 // the end of the penalty it started; 0: none
	// denied is when the key is allowed again, as of the message: the
	// end of its penalty, or when its rate falls back.
	denied int64
	// again: not the crossing but a later message of the marked key, over
	// a policy that acts (extraRule.acting); it raises no alert.
	again bool
	spike *Spike // a spike's why
	cost  int64  // the crossing message's cost, under a policy that weighs (0: it does not)
}

// A msg is one message as the tables see it: its names, its text (for
// similar policies), the hash of its normalized text (for repeat
// policies), the hashes of its user and room, and what it carries,
// computed once per message for all the policies whose scope needs them
// (nameHash; 0 when no policy does) or whose cost weighs them (counts;
// zero when none does, and for a check without text or mentions, which
// costs its messages weight).
type msg struct {
	at                 int64
	room, user         string
	body               string
	text               uint64
	userHash, roomHash uint64
	id                 uint64 // the keyed hash of its id; 0: none
	counts             measure.Counts
}

// table keeps the state of every key of one policy: an index from the
// key's hash to a place, and at that place, in parallel slabs, an entry
// (hot: the fixed part of the state, the alert mark and the key itself,
// all that a hit reads but the variable part of the state), the key's
// links in a doubly linked list from the most to the least recently
// observed key (see touch for how recently) and the variable part of its
// state (ext,
// stride elements). An entry is 64 bytes at most, a cache line, so that a
// hit reads three cold lines (index slot, entry, ext element) where
// separate slabs for state and key, and a key string, would take five; and
// entries hold no pointer, so the garbage collector does not scan them.
//
// The key of a plain table is its name: the user, the room, both
// (appendKey), or "" for a group; a match is confirmed by comparing names,
// so it is exact. A name of up to keyInline bytes is kept in the entry, a
// longer one in long (made when the first one comes). The key of a hashed
// table (a repeat policy, whose keys include the text) is a pair of 64-bit
// hashes instead, of the name (nameHash, roomUserHash) and of the
// normalized text (textHash): 16 bytes with nothing to clone or allocate,
// for keys that are nearly all new. Two keys are taken for one only if
// both hashes agree, which takes a collision of random 64-bit values (the
// hashes are keyed with a secret, so none can be made on purpose; see
// hashKey): a new key is taken
// for one of the n tracked ones with a probability below n/2^64, under 1 in
// 10^14 with the default cap of 100,000 keys, or once in more than 500
// years of 10,000 new keys a second. A hashed key's room and user are
// needed only to list it in Active: names keeps them for the keys that have
// been marked as over, and only those.
//
// Memory is bounded two ways. A key whose state is back at rest (the same
// as a key never seen) can be forgotten without changing any answer: each
// new key first evicts up to two such keys from the cold end of the list,
// and Sweep evicts them all; so the number of keys follows the live keys,
// not the events. And at most max keys are kept: a new key beyond that
// evicts the one at the cold end of the list, at rest or not (evicted): a
// key that at least half the keys tracked were observed after (see touch).
//
// One mutex guards a table, held briefly by each call, or for a few dozen
// messages by ObserveBatch. (An RWMutex would let checks run in parallel,
// but costs observe, by far the most frequent call, two more atomic
// operations.) Nothing allocates for a key already tracked, nor for a new
// key (but the slabs' growth) of a hashed table or with a short name.
type table[S, E any, K kernel[S, E]] struct {
	k         K
	scope     Scope
	price     price // what a message costs
	hashed    bool  // the key includes a text hash (Repeat)
	keyPart   uint8
	hk        *hashKey // the Set's
	groupHash uint64   // nameHash(""), the name hash of a group's key
	stride    int
	max       int

	mu         sync.Mutex
	index      index
	states     []entry[S]
	links      []link
	long       []string        // plain tables: the names longer than keyInline, or nil
	names      map[int32]names // hashed tables: the names of the keys ever marked
	ext        []E
	head, tail int32  // most and least recently moved to the head; -1 when empty
	moves      uint64 // keys put at the head so far
	free       int32  // free places, chained by links[i].next; -1 when none
	n          int    // keys tracked
	zero       []E    // the ext of a fresh key; never written
	fresh      S      // the state of a fresh key; never written
	evicted    uint64
	expired    uint64
	sink       uint64 // where observeAll's early loads go

	rule  extraRule
	extra map[int32]*keyExtra // the keys that have extras (extra.go)
	// ids: a consuming check has come (consume.go), so every hit with an
	// id is remembered, and an event whose id a consuming check counted
	// is not counted again.
	ids bool
}

type entry[S any] struct {
	since int64 // the alert mark: when the key crossed; chat.Never when not
	st    S
	// A plain table's name if it fits (its length in klen, or longName),
	// or a hashed table's pair (klen: hasNames once names has its names).
	key  [keyInline]byte
	klen uint8
}

// A link is a place's in the list, and its move: the table's moves when
// the key was last put at the head.
type link struct {
	prev, next int32
	moved      uint64
}

const (
	keyInline = 39
	longName  = 255
	hasNames  = 1
)

const none = -1

func newTable[S, E any, K kernel[S, E]](k K, scope Scope, p price, hashed bool, max int, hk *hashKey) *table[S, E, K] {
	stride := k.stride()
	return &table[S, E, K]{
		k: k, scope: scope, price: p, hashed: hashed, stride: stride, max: max,
		keyPart: map[Scope]uint8{ScopeUser: keyUser, ScopeRoom: keyRoom, ScopeUserInRoom: keyRoomUser}[scope],
		hk:      hk, groupHash: hk.nameHash(""),
		index: newIndex(0),
		head:  none, tail: none, free: none,
		zero: make([]E, stride), fresh: k.fresh(),
	}
}

// find returns the place of k, or none.
func (t *table[S, E, K]) find(k *key) int32 {
	x := &t.index
	mask, tag := x.mask(), k.hash>>32
	for p := k.hash >> x.shift; ; p = (p + 1) & mask {
		s := x.slots[p]
		if s == 0 {
			return none
		}
		if i := int32(uint32(s)) - 1; s>>32 == tag && t.is(i, k) {
			return i
		}
	}
}

func (t *table[S, E, K]) extOf(i int32) []E {
	return t.ext[int(i)*t.stride : int(i+1)*t.stride]
}

func (t *table[S, E, K]) observe(m msg, mark bool) crossing {
	var k key
	t.keyOf(&m, &k)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hit(&k, &m, mark)
}

// batchChunk is how many messages observeAll (ObserveBatch) records under one taking of a
// policy's lock: enough that the locking costs next to nothing and that
// the cache misses of many keys overlap, few enough that a concurrent
// Check waits some tens of microseconds at most.
const batchChunk = 64

func (t *table[S, E, K]) observeAll(ms []msg, sel []int32, mark bool, out *[]crossing) {
	var keys [batchChunk]key
	for n, j := range sel {
		t.keyOf(&ms[j], &keys[n])
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prefetch(ms, sel, &keys)
	for n, j := range sel {
		if c := t.hit(&keys[n], &ms[j], mark); c.j >= 0 {
			c.j = int(j)
			*out = append(*out, c)
		}
	}
}

// prefetch loads, for each key, the index slot where its search starts,
// then the entry and ext element that slot points to, if any, and the
// index slots of the keys that new ones may evict: in tight loops whose
// loads do not wait for each other, so that their cache misses overlap
// instead of coming one after the other, as they would if each message
// were handled in turn. What it finds are only hints (hits move keys):
// hit looks each key up again, in cache by then.
func (t *table[S, E, K]) prefetch(ms []msg, sel []int32, keys *[batchChunk]key) {
	x := &t.index
	var sink uint64
	for n := range sel {
		sink += x.slots[keys[n].hash>>x.shift]
	}
	var places [batchChunk]int32
	for n := range sel {
		s := x.slots[keys[n].hash>>x.shift]
		places[n] = int32(uint32(s)) - 1
		if s>>32 != keys[n].hash>>32 {
			places[n] = none
		}
	}
	// Each new key may evict one from the cold end of the list (at rest,
	// or over the cap): the index slots of as many keys from there.
	fresh, now := 0, ms[sel[len(sel)-1]].at
	for n := range sel {
		if places[n] == none {
			fresh++
		}
	}
	for i := t.tail; i != none && fresh > 0; i, fresh = t.links[i].prev, fresh-1 {
		if t.n < t.max && !t.atRest(i, now) {
			break
		}
		sink += x.slots[t.hashOf(i)>>x.shift]
	}
	for n, j := range sel {
		i := places[n]
		if i == none {
			continue
		}
		sink += uint64(t.states[i].klen) + uint64(t.links[i].moved)
		if ext := t.extOf(i); len(ext) > 0 {
			sink += uint64(*(*byte)(unsafe.Pointer(&ext[t.k.slot(ms[j].at)])))
		}
	}
	t.sink = sink
}

// hit records message m as a hit of key k, of m's cost, and returns the
// crossing it makes (j 0), or none (j -1); the caller holds the lock. A
// message that costs nothing is not counted: it neither crosses nor
// clears the key's mark. In consume mode (m carries its id's hash once a
// consuming check has come to the Set), a message whose id a consuming
// check of the key counted is not counted again, and the id of every
// other one is remembered, by every table: a consuming check with that id
// that comes later is then answered as counted, whichever policies it
// meets.
func (t *table[S, E, K]) hit(k *key, m *msg, mark bool) crossing {
	cost := t.price.of(m)
	if cost == 0 {
		return crossing{j: -1}
	}
	i := t.find(k)
	if i == none {
		i = t.insert(k, m.at)
	}
	x := t.extraAt(i)
	if m.id != 0 && x != nil && x.counted(m.id, m.at, t.rule.window, true) {
		t.touch(i)
		return crossing{j: -1}
	}
	e, ext := &t.states[i], t.extOf(i)
	ok := t.k.hit(&e.st, ext, m.at, cost) && (x == nil || x.until <= m.at)
	c := crossing{j: -1}
	switch {
	case ok:
		e.since = chat.Never
	case mark && e.since == chat.Never:
		c = t.cross(i, m)
	case mark && t.rule.acting:
		v := t.verdictAt(i, m.at, 1)
		c = crossing{count: v.Count, limit: v.Limit, denied: m.at + v.RetryAfter.Milliseconds(), again: true}
	}
	if m.id != 0 {
		t.ids = true
		t.extraOf(i).remember(idHit{id: m.id, at: m.at, cost: cost}, &t.rule)
	}
	t.touch(i)
	return c
}

// cross marks the key at place i as crossed by message m, starts its
// penalty if the policy has one, and returns the crossing. Its count is
// what the key holds, and it is denied until a message of cost 1 fits
// (Active's rule, whatever m cost).
func (t *table[S, E, K]) cross(i int32, m *msg) crossing {
	e := &t.states[i]
	e.since = m.at
	c := crossing{}
	if len(t.rule.steps) > 0 {
		c.until = t.extraOf(i).strike(m.at, &t.rule)
	}
	v := t.verdictAt(i, m.at, 1)
	c.count, c.limit, c.denied = v.Count, v.Limit, m.at+v.RetryAfter.Milliseconds()
	if !t.price.unit {
		c.cost = t.price.of(m)
	}
	if t.hashed && e.klen == 0 { // kept until the key is forgotten
		if t.names == nil {
			t.names = make(map[int32]names)
		}
		room, user := keyOf(t.scope, m.room, m.user)
		t.names[i] = names{strings.Clone(room), strings.Clone(user)}
		e.klen = hasNames
	}
	return c
}

func (t *table[S, E, K]) check(m msg) Verdict {
	var k key
	t.keyOf(&m, &k)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.verdict(m)
}

func (t *table[S, E, K]) active(now int64, fn func(room, user string, v Verdict, since, until int64)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := t.head; i != none; i = t.links[i].next {
		e := &t.states[i]
		if e.since == chat.Never {
			continue
		}
		if v := t.verdictAt(i, now, 1); !v.Allowed {
			var until int64
			if x := t.extraAt(i); x != nil && x.until > now {
				until = x.until
			}
			var room, user string
			if t.hashed {
				room, user = t.names[i].room, t.names[i].user
			} else {
				room, user = splitKey(t.nameAt(i), t.scope)
				room, user = strings.Clone(room), strings.Clone(user)
			}
			fn(room, user, v, e.since, until)
		}
	}
}

// sweep forgets every key at rest at now, and gives memory back when most
// of the slabs are free.
func (t *table[S, E, K]) sweep(now int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	gone := 0
	for i := t.tail; i != none; {
		prev := t.links[i].prev
		if t.atRest(i, now) {
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

func (t *table[S, E, K]) stats() (keys int, evicted, expired uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.evicted, t.expired
}

func (t *table[S, E, K]) remembersIDs() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ids
}

func (t *table[S, E, K]) setRule(r extraRule) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rule = r
}

func (t *table[S, E, K]) addCounts(evicted, expired uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evicted += evicted
	t.expired += expired
}
