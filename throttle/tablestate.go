package throttle

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/snapshot"
)

// The flags of a saved key.
const (
	savedMark  = 1 << iota // marked as over: since follows
	savedNames             // a hashed key's names follow
	savedExtra             // its extras follow its state (format 2)
)

// A tableCopy is what appendState copies of a table under its lock: the
// slabs as they are, free places too. They are flat (but long and names,
// whose strings are not copied), so the copy is a few memory copies,
// faster than a walk of the list, let alone its encoding.
type tableCopy[S, E any] struct {
	states           []entry[S]
	links            []link
	ext              []E
	long             []string
	names            map[int32]names
	extra            map[int32]*keyExtra // deep copies
	ids              bool
	tail             int32
	n                int
	evicted, expired uint64
}

// extended reports whether the copy needs format 2: it remembers ids, or
// some key has extras.
func (c *tableCopy[S, E]) extended() bool { return c.ids || len(c.extra) > 0 }

func (t *table[S, E, K]) copyState() (bool, func(b []byte, format byte) []byte) {
	c := t.copySlabs()
	return c.extended(), func(b []byte, format byte) []byte { return t.appendCopy(b, c, format) }
}

func (t *table[S, E, K]) copySlabs() *tableCopy[S, E] {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &tableCopy[S, E]{
		states: slices.Clone(t.states), links: slices.Clone(t.links), ext: slices.Clone(t.ext),
		long: slices.Clone(t.long), names: maps.Clone(t.names), extra: cloneExtras(t.extra), ids: t.ids,
		tail: t.tail, n: t.n, evicted: t.evicted, expired: t.expired,
	}
}

// cloneExtras copies the keys' extras, which their table goes on changing.
func cloneExtras(m map[int32]*keyExtra) map[int32]*keyExtra {
	if len(m) == 0 {
		return nil
	}
	out := make(map[int32]*keyExtra, len(m))
	for i, x := range m {
		out[i] = &keyExtra{ids: slices.Clone(x.ids), until: x.until, strikes: slices.Clone(x.strikes)}
	}
	return out
}

// appendCopy encodes c, a copy of t, with t's lock released. Keys go in
// the order of the list, from its cold end (the least recently observed),
// so that loadState puts each one in turn at the head of the list.
func (t *table[S, E, K]) appendCopy(b []byte, c *tableCopy[S, E], format byte) []byte {
	b = snapshot.AppendUvarint(b, uint64(c.n))
	b = snapshot.AppendUvarint(b, c.evicted)
	b = snapshot.AppendUvarint(b, c.expired)
	if format >= 2 {
		b = append(b, boolByte(c.ids))
	}
	for i := c.tail; i != none; i = c.links[i].prev {
		e := &c.states[i]
		var flags byte
		if e.since != chat.Never {
			flags |= savedMark
		}
		if t.hashed && e.klen == hasNames {
			flags |= savedNames
		}
		x := c.extra[i]
		if x != nil {
			flags |= savedExtra
		}
		b = append(b, flags)
		if flags&savedMark != 0 {
			b = snapshot.AppendVarint(b, e.since)
		}
		switch {
		case t.hashed:
			b = append(b, e.key[:16]...)
		case e.klen == longName:
			b = snapshot.AppendString(b, c.long[i])
		default:
			b = snapshot.AppendBytes(b, e.key[:e.klen])
		}
		if flags&savedNames != 0 {
			b = snapshot.AppendString(b, c.names[i].room)
			b = snapshot.AppendString(b, c.names[i].user)
		}
		b = t.k.appendState(b, &e.st, c.ext[int(i)*t.stride:int(i+1)*t.stride])
		if x != nil {
			b = appendExtra(b, x, &t.price)
		}
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// A key's extras in a saved state: its ids (how many, then each one's
// hash, 8 bytes little-endian, its instant, the alert mark before it,
// whether a consuming check's and, if the policy weighs what messages
// carry, its cost), its penalty's end, its strikes.
func appendExtra(b []byte, x *keyExtra, p *price) []byte {
	b = snapshot.AppendUvarint(b, uint64(len(x.ids)))
	for _, h := range x.ids {
		b = binary.LittleEndian.AppendUint64(b, h.id)
		b = snapshot.AppendVarint(b, h.at)
		b = snapshot.AppendVarint(b, h.since)
		b = append(b, boolByte(h.consumed))
		if !p.unit {
			b = snapshot.AppendUvarint(b, uint64(h.cost))
		}
	}
	b = snapshot.AppendVarint(b, x.until)
	b = snapshot.AppendUvarint(b, uint64(len(x.strikes)))
	for _, s := range x.strikes {
		b = snapshot.AppendVarint(b, s)
	}
	return b
}

// readExtra reads what appendExtra wrote, no more ids than the rule keeps
// nor strikes than a policy may have steps.
func (t *table[S, E, K]) readExtra(r *snapshot.Reader) *keyExtra {
	return readKeyExtra(r, t.rule.idCap, &t.price)
}

// readKeyExtra reads what appendExtra wrote with price p, at most idCap
// ids.
func readKeyExtra(r *snapshot.Reader, idCap int, p *price) *keyExtra {
	x := &keyExtra{}
	n := int(r.UvarintUpTo(uint64(idCap), "ids"))
	for range n {
		id := hash64(r)
		h := idHit{id: id, at: r.Varint(), since: r.Varint()}
		switch r.Byte() {
		case 0:
		case 1:
			h.consumed = true
		default:
			r.Fail("an id neither consumed nor not")
		}
		h.cost = 1
		if !p.unit {
			h.cost = int64(r.UvarintUpTo(maxCost, "cost"))
			if h.cost == 0 {
				r.Fail("an id of a hit that cost nothing")
			}
		}
		if r.Err() != nil {
			return nil
		}
		if id&1 == 0 {
			r.Fail("an id hash %#x that idHash does not make", id)
		}
		x.ids = append(x.ids, h)
	}
	x.until = r.Varint()
	n = int(r.UvarintUpTo(maxSteps, "strikes"))
	for range n {
		x.strikes = append(x.strikes, r.Varint())
	}
	return x
}

// loadState reads the keys into a new table, as many as they say but no
// more than max, nor than the bytes left can hold, each checked before it
// is added. Each key is added at the head of the list, as a new key is,
// so the list is made as it is used; its places are 0 to n-1 (a state
// that changes no answer: places are only where keys are).
func (t *table[S, E, K]) loadState(r *snapshot.Reader, hk *hashKey, mark bool, format byte) (store, error) {
	nt := newTable[S, E](t.k, t.scope, t.price, t.hashed, t.max, hk)
	nt.rule = t.rule
	n := int(r.UvarintUpTo(uint64(t.max), "keys"))
	nt.evicted, nt.expired = r.Uvarint(), r.Uvarint()
	if format >= 2 {
		switch r.Byte() {
		case 0:
		case 1:
			nt.ids = true
		default:
			r.Fail("ids neither remembered nor not")
		}
	}
	if r.Err() != nil {
		return nil, r.Err()
	}
	// A key takes at least 3 bytes (flags, name or hashes, state): room
	// for the keys that the bytes left can hold, but their ext, which may
	// be thousands of times larger than its bytes, grows as keys come.
	if c := min(n, r.Len()/3); c > 0 {
		nt.states = make([]entry[S], 0, c)
		nt.links = make([]link, 0, c)
		nt.index = newIndex(c)
	}
	for j := range n {
		nt.loadKey(r, mark, format)
		if r.Err() != nil {
			return nil, fmt.Errorf("key %d of %d: %w", j, n, r.Err())
		}
	}
	return nt, nil
}

// loadKey reads one key and adds it at the head of the list.
func (t *table[S, E, K]) loadKey(r *snapshot.Reader, mark bool, format byte) {
	flags := r.Byte()
	known := byte(savedMark | savedNames)
	if format >= 2 {
		known |= savedExtra
	}
	if flags&^known != 0 || flags&savedNames != 0 && !t.hashed {
		r.Fail("flags %#x", flags)
	}
	since := int64(chat.Never)
	if flags&savedMark != 0 {
		if since = r.Varint(); since == chat.Never {
			r.Fail("marked at chat.Never")
		}
	}
	var m msg // the key as a message would make it
	var pair []byte
	if t.hashed {
		pair = r.Next(16)
	} else {
		name := string(r.Bytes())
		m.room, m.user = t.namesOf(r, name)
	}
	if flags&savedNames != 0 {
		m.room, m.user = string(r.Bytes()), string(r.Bytes())
		if room, user := keyOf(t.scope, m.room, m.user); room != m.room || user != m.user {
			r.Fail("names %q and %q do not make a key of scope %s", m.room, m.user, t.scope)
		}
	}
	switch {
	case r.Err() != nil:
		return
	case flags&savedMark != 0 && !mark:
		r.Fail("a key of a shadow policy is marked")
		return
	case t.hashed && flags&savedMark != 0 && flags&savedNames == 0:
		r.Fail("a marked key without its names")
		return
	case flags&savedNames != 0 && !mark:
		r.Fail("a key of a shadow policy keeps its names")
		return
	}
	m.roomHash, m.userHash = t.hk.nameHash(m.room), t.hk.nameHash(m.user)
	var k key
	if t.hashed {
		m.text = binary.LittleEndian.Uint64(pair[8:])
		t.keyOf(&m, &k)
		name := binary.LittleEndian.Uint64(pair[:8])
		if flags&savedNames != 0 && k.pair.name != name {
			r.Fail("names %q and %q do not hash to the key's", m.room, m.user)
			return
		}
		k.pair.name, k.hash = name, pairHash(name, m.text)
	} else {
		t.keyOf(&m, &k)
	}
	if t.find(&k) != none {
		r.Fail("twice")
		return
	}
	i := t.add(&k)
	e := &t.states[i]
	e.since = since
	t.k.readState(r, &e.st, t.extOf(i))
	if flags&savedExtra != 0 {
		if x := t.readExtra(r); x != nil {
			if t.extra == nil {
				t.extra = make(map[int32]*keyExtra)
			}
			t.extra[i] = x
		}
	}
	if flags&savedNames != 0 {
		if t.names == nil {
			t.names = make(map[int32]names)
		}
		t.names[i] = names{m.room, m.user}
		e.klen = hasNames
	}
}

// namesOf is the room and user of a plain table's key name, as keyOf
// gives them; it fails r unless name is one that setKey keeps.
func (t *table[S, E, K]) namesOf(r *snapshot.Reader, name string) (room, user string) {
	switch t.keyPart {
	case keyRoomUser: // appendKey's, which splitKey trusts
		n, w := binary.Uvarint([]byte(name[:min(len(name), binary.MaxVarintLen64)]))
		if w <= 0 || n > uint64(len(name)-w) || w != len(snapshot.AppendUvarint(nil, n)) {
			r.Fail("%q is not the name of a key of scope %s", name, t.scope)
			return "", ""
		}
	case keyGroup:
		if name != "" {
			r.Fail("%q is not the name of a group", name)
		}
	}
	return splitKey(name, t.scope)
}

// carry returns a table of kernel k holding t's keys, in the same places
// and order, with their counts of evicted and expired keys, each key's
// state turned into one of k by k.keep (old: t's settings), and marked
// only if mark: the store of t's policy once its settings changed but not
// its scope, algorithm or window (Set.Reconfigure). It copies t, which
// stays as it was, under t's lock.
func (t *table[S, E, K]) carry(k K, old settings, mark bool) *table[S, E, K] {
	t.mu.Lock()
	defer t.mu.Unlock()
	nt := newTable[S, E](k, t.scope, t.price, t.hashed, t.max, t.hk)
	nt.index = index{slots: slices.Clone(t.index.slots), shift: t.index.shift, n: t.index.n}
	nt.states, nt.links, nt.long = slices.Clone(t.states), slices.Clone(t.links), slices.Clone(t.long)
	nt.head, nt.tail, nt.free, nt.n, nt.moves = t.head, t.tail, t.free, t.n, t.moves
	nt.evicted, nt.expired = t.evicted, t.expired
	nt.ext = make([]E, len(t.states)*nt.stride)
	nt.extra, nt.ids = cloneExtras(t.extra), t.ids
	if mark {
		nt.names = maps.Clone(t.names)
	}
	for i := t.head; i != none; i = t.links[i].next {
		e := &nt.states[i]
		k.keep(old, &e.st, t.extOf(i), nt.extOf(i))
		if !mark { // a shadow policy marks no key, and keeps no names
			e.since = chat.Never
			if t.hashed {
				e.klen = 0
			}
		}
	}
	return nt
}
