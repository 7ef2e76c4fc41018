package throttle

import (
	"slices"
	"strings"
	"sync"

	"github.com/chatpulse/chatpulse/chat"
)

// simStore keeps the keys of one similar policy: for each key (a room or
// a user), the messages of its window as fingerprints. Its state varies
// in size with the traffic, so it is not a table of fixed-size states:
// each key has its own window.
//
// A key's window is three things:
//
//   - recs, its messages in the order they came: an instant and a group.
//     Expiry takes them from the front while the front is out of the
//     window. (A late message may sit behind a newer one a little longer
//     than its window: it counts for nothing meanwhile.)
//   - groups, one per distinct fingerprint, each with its messages (the
//     user's hash and the instant, in the order they came): a copy-paste
//     wave of a thousand copies is one group, compared once per check.
//   - post, the index (simindex.go): each of a group's keys
//     (fingerprint.keys) to the groups indexed by it. Identical
//     fingerprints have the same keys, so a fingerprint's group, if any,
//     is among those of its first key.
//
// Memory per message: 16 bytes in recs, 16 in its group; per distinct
// fingerprint, 4 bytes a pair hash in a block of a power of two of them
// (at most simK: 512 bytes; simgroup.go), 72 bytes of group, and an entry
// in the index for each of its keys (one for a text of fewer than 20
// pairs; at the default similarity at most 26 single keys and 28 pair
// keys). Measured with the slabs' and index's slack
// (TestSimilarMemoryBounded): about 170 bytes a message of unique 8-word
// texts, 1.7 KB of unique texts of 128 pairs or more. Never the text.
// A group goes with its last message, and a key
// with its last message (as every store forgets a key at rest); a key
// whose window held many more groups and index entries than it does now,
// or whose hash slab is mostly free blocks,
// copies what it keeps into right-sized slabs and index (shrink), so a
// flood of unique texts is given back once it has left the window.
//
// Keys are in a list from the most to the least recently observed; a new
// key evicts up to two keys at rest from its cold end, and, past the cap,
// the coldest key whatever its state. One mutex guards the store, as a
// table's does.
type simStore struct {
	limit, w int64
	sim      int64 // similarity, millionths
	minChars int
	scope    Scope
	hk       *hashKey
	max      int

	mu   sync.Mutex
	keys map[string]*simKey
	lru[simKey, *simKey]
	evicted, expired uint64
	rule             extraRule
	ids              bool     // a consuming check has come: hits' ids are remembered
	stamp            uint64   // the last comparison's: a group compared with it has seen == stamp
	found            []member // a comparison's scratch
	ixKeys           []uint64 // an index update's or lookup's scratch
	one              [1]int32 // indexed's scratch
	users            []uint64 // over's scratch: the distinct users gathered
	need             int      // gather stops once this many are found (0: never)
	enough           bool     // gather found need
}

type simKey struct {
	name   string
	since  int64       // the alert mark: when the key crossed; chat.Never when not
	wave   fingerprint // while marked: the fingerprint of the message that crossed
	held   int64       // while marked: the wave holds before this instant (holds)
	newest int64       // the newest instant the key has seen; chat.Never: none
	recs   []simRec    // recs[head:] are the messages, in the order they came
	head   int
	groups []simGroup
	free   []int32  // places in groups with no group
	hashes hashSlab // the groups' fingerprints (simgroup.go)
	post   postings // index key (fingerprint.keys) -> its groups
	peak   int      // the largest size since the last shrink
	ids    map[uint64]simID
	extra  *keyExtra // its penalty and strikes (not its ids: see ids)
	lruLinks[simKey]
}

func (k *simKey) links() *lruLinks[simKey] { return &k.lruLinks }

type simRec struct {
	at int64
	g  int32
}

// A simID is a hit that carried an id, for a key's ids (see extraRule):
// every hit's, since any message can be allowed.
type simID struct {
	at       int64
	consumed bool
}

func newSimStore(s settings, scope Scope, max int, hk *hashKey) *simStore {
	return &simStore{limit: int64(s.limit), w: s.window.Milliseconds(), sim: s.similarity, minChars: s.minChars, scope: scope, hk: hk, max: max, keys: map[string]*simKey{}}
}

// sketchOf sets sk to the fingerprint of m's text and reports whether it
// has one: a text of at least minChars code points with a word pair.
func (t *simStore) sketchOf(m *msg, sk *sketch) bool {
	sk.n, sk.cut = 0, false // no fingerprint: not the last message's (observeAll reuses sk)
	n := 0
	for range m.body {
		if n++; n >= t.minChars {
			break
		}
	}
	if n < t.minChars {
		return false
	}
	t.hk.pairsOf(m.body, sk)
	return sk.n > 0
}

func (t *simStore) nameOf(m *msg) string {
	if t.scope == ScopeUser {
		return m.user
	}
	return m.room
}

// key returns the key of m, adding it if new (evicting first).
func (t *simStore) key(m *msg) *simKey {
	name := t.nameOf(m)
	if k := t.keys[name]; k != nil {
		return k
	}
	for range 2 {
		if t.tail == nil || !t.atRest(t.tail, m.at) {
			break
		}
		t.remove(t.tail)
		t.expired++
	}
	if len(t.keys) >= t.max {
		t.remove(t.tail)
		t.evicted++
	}
	k := &simKey{name: strings.Clone(name), since: chat.Never, newest: chat.Never}
	t.keys[k.name] = k
	t.pushHead(k)
	return k
}

func (t *simStore) remove(k *simKey) {
	t.unlink(k)
	delete(t.keys, k.name)
}

// atRest reports whether k at now is the same as a key never seen: its
// window empty, no id remembered, no penalty or strike that counts. It
// lets the window catch up to now.
func (t *simStore) atRest(k *simKey, now int64) bool {
	t.expire(k, max(now, k.newest))
	if k.head < len(k.recs) {
		return false
	}
	for _, h := range k.ids {
		if h.at > max(now, k.newest)-t.w {
			return false
		}
	}
	return k.extra == nil || k.extra.atRest(now, &t.rule)
}

// expire drops the messages at the front of k's window that are out of
// it at now, their groups once empty, and ids as old.
func (t *simStore) expire(k *simKey, now int64) {
	edge := now - t.w
	for k.head < len(k.recs) && k.recs[k.head].at <= edge {
		g := &k.groups[k.recs[k.head].g]
		if g.drop(0); g.count == 0 {
			t.dropGroup(k, k.recs[k.head].g)
		}
		k.head++
	}
	if k.head == len(k.recs) {
		k.recs, k.head = k.recs[:0], 0
	} else if k.head >= 64 && 2*k.head >= len(k.recs) {
		k.recs = k.recs[:copy(k.recs, k.recs[k.head:])]
		k.head = 0
	}
	if len(k.ids) > 0 && len(k.ids) > 2*(len(k.recs)-k.head)+64 {
		for id, h := range k.ids {
			if h.at <= edge {
				delete(k.ids, id)
			}
		}
	}
	if k.peak >= 64 && 4*k.size() < k.peak || k.hashes.sparse() {
		t.shrink(k)
	}
}

// size is what the slabs and maps of k hold: its groups and the keys of
// its index (a long text's group has up to 54 of them at the default
// similarity, a short one's 1).
func (k *simKey) size() int {
	return len(k.groups) - len(k.free) + k.post.keys()
}

// record adds a message of fingerprint f by user at `at` to k's window.
func (t *simStore) record(k *simKey, f fingerprint, user uint64, at int64) {
	gi := t.identical(k, f)
	if gi < 0 {
		gi = t.addGroup(k, f)
	}
	k.groups[gi].push(member{at: at, user: user})
	k.recs = append(grow(k.recs, 1), simRec{at: at, g: gi})
}

// indexed returns the groups of k indexed by key x, in t's scratch when
// one: valid until the next call.
func (t *simStore) indexed(k *simKey, x uint64) []int32 {
	return k.post.lookup(x, &t.one)
}

// identical returns the group of k whose fingerprint is f, or -1 if none.
// Its candidates are few, and were compared with f a moment before (gather).
func (t *simStore) identical(k *simKey, f fingerprint) int32 {
	t.ixKeys = f.keys(t.sim, t.ixKeys[:0])
	if len(t.ixKeys) == 0 {
		return -1
	}
	for _, gi := range t.indexed(k, t.ixKeys[0]) {
		if g := k.fp(&k.groups[gi]); g.cut == f.cut && slices.Equal(g.h, f.h) {
			return gi
		}
	}
	return -1
}

// addGroup adds a group of a copy of fingerprint f and indexes it.
func (t *simStore) addGroup(k *simKey, f fingerprint) int32 {
	var gi int32
	if n := len(k.free); n > 0 {
		gi, k.free = k.free[n-1], k.free[:n-1]
	} else {
		gi = int32(len(k.groups))
		k.groups = append(grow(k.groups, 1), simGroup{})
	}
	g := &k.groups[gi]
	*g = simGroup{off: k.hashes.put(f.h), n: uint8(len(f.h)), cut: f.cut, many: g.many[:0]}
	t.ixKeys = f.keys(t.sim, t.ixKeys[:0])
	g.key = t.ixKeys[0]
	for _, x := range t.ixKeys {
		k.post.add(x, gi)
	}
	k.peak = max(k.peak, k.size())
	return gi
}

// dropGroup forgets group gi, which has no message left.
func (t *simStore) dropGroup(k *simKey, gi int32) {
	g := &k.groups[gi]
	if f := k.fp(g); f.oneKey() {
		k.post.remove(g.key, gi) // its hashes need not be read
	} else {
		t.ixKeys = f.keys(t.sim, t.ixKeys[:0])
		for _, x := range t.ixKeys {
			k.post.remove(x, gi)
		}
	}
	k.hashes.release(g.off, int(g.n))
	// A place's next group reuses the room of its members, if small.
	room := g.many[:0]
	if cap(room) > 4 {
		room = nil
	}
	*g = simGroup{many: room}
	k.free = append(k.free, gi)
}

// shrink copies k's window into right-sized slabs, index and maps: none of
// them ever shrinks, so a key that once held a flood would keep its size.
func (t *simStore) shrink(k *simKey) {
	t.refill(k, k.recs[k.head:], k.groups, k.hashes.h)
	if len(k.ids) > 0 {
		ids := make(map[uint64]simID, len(k.ids))
		for id, h := range k.ids {
			ids[id] = h
		}
		k.ids = ids
	}
}

// refill makes k's window the messages recs, of groups whose hashes are
// in hashes, in new slabs and maps, indexed by t's similarity. It copies
// everything: a place's hashes and members are reused once its group is
// gone, so k shares nothing with groups (carry's old store may still be
// observing).
func (t *simStore) refill(k *simKey, recs []simRec, groups []simGroup, hashes []uint32) {
	k.groups, k.free, k.hashes, k.post, k.peak, k.head = nil, nil, hashSlab{}, postings{}, 0, 0
	k.recs = make([]simRec, 0, len(recs))
	place := make(map[int32]int32)
	for _, r := range recs {
		gi, ok := place[r.g]
		if !ok {
			g := &groups[r.g]
			gi = t.addGroup(k, fingerprint{h: hashes[g.off : g.off+int32(g.n)], cut: g.cut})
			for _, m := range g.members() {
				k.groups[gi].push(m)
			}
			place[r.g] = gi
		}
		k.recs = append(k.recs, simRec{at: r.at, g: gi})
	}
}
