package throttle

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/snapshot"
)

// simStateVersion is the first byte of a similar policy's part of a saved
// state: a part of another version is refused, not misread.
const simStateVersion = 1

// The flags of a saved similar key.
const (
	simMarked = 1 << iota // since and the wave's fingerprint follow
	simExtra              // its penalty and strikes follow
)

// copyState encodes the store under its lock: its windows are many small
// slices, which encoding walks as fast as copying would. Its part is the
// same in either format of the Set's state.
//
//	version   1 byte, simStateVersion
//	keys      how many, how many the cap evicted, how many expired
//	ids       1 byte: 1 if consuming checks came
//	then each key, cold end of the list first:
//	  flags   1 byte: simMarked, simExtra
//	  name    the room or the user (length, bytes)
//	  since   if marked, and the wave's fingerprint
//	  newest  the newest instant it has seen
//	  groups  how many, then each one's fingerprint
//	  recs    how many, then each one's group, how long before newest it
//	          came, its user's hash (8 bytes, little-endian)
//	  ids     how many, then each one's hash (8 bytes), instant, and 1 if
//	          consumed
//	  extra   if simExtra: as a table's (appendExtra), without ids
//
// A fingerprint is 1 if cut, how many hashes, then the first and each
// one's difference from the one before.
func (t *simStore) copyState() (bool, func(b []byte, format byte) []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := []byte{simStateVersion}
	b = snapshot.AppendUvarint(b, uint64(len(t.keys)))
	b = snapshot.AppendUvarint(b, t.evicted)
	b = snapshot.AppendUvarint(b, t.expired)
	b = append(b, boolByte(t.ids))
	extended := t.ids
	for k := t.tail; k != nil; k = k.prev {
		extended = extended || k.extra != nil
		b = k.append(b)
	}
	return extended, func(out []byte, _ byte) []byte { return append(out, b...) }
}

func (k *simKey) append(b []byte) []byte {
	var flags byte
	if k.since != chat.Never {
		flags |= simMarked
	}
	if k.extra != nil {
		flags |= simExtra
	}
	b = append(b, flags)
	b = snapshot.AppendString(b, k.name)
	if flags&simMarked != 0 {
		b = snapshot.AppendVarint(b, k.since)
		b = appendFingerprint(b, k.wave)
	}
	b = snapshot.AppendVarint(b, k.newest)
	// The groups in the order of their first rec, numbered so.
	place := make(map[int32]uint64)
	var order []int32
	for _, r := range k.recs[k.head:] {
		if _, ok := place[r.g]; !ok {
			place[r.g] = uint64(len(order))
			order = append(order, r.g)
		}
	}
	b = snapshot.AppendUvarint(b, uint64(len(order)))
	for _, gi := range order {
		b = appendFingerprint(b, k.fp(&k.groups[gi]))
	}
	b = snapshot.AppendUvarint(b, uint64(len(k.recs)-k.head))
	next := make(map[int32]int) // the member of each group that comes next
	for _, r := range k.recs[k.head:] {
		m := k.groups[r.g].members()[next[r.g]]
		next[r.g]++
		b = snapshot.AppendUvarint(b, place[r.g])
		b = snapshot.AppendUvarint(b, uint64(k.newest)-uint64(m.at))
		b = binary.LittleEndian.AppendUint64(b, m.user)
	}
	ids := make([]uint64, 0, len(k.ids))
	for id := range k.ids {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same state, the same bytes
	b = snapshot.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id)
		b = snapshot.AppendVarint(b, k.ids[id].at)
		b = append(b, boolByte(k.ids[id].consumed))
	}
	if k.extra != nil {
		b = appendExtra(b, &keyExtra{until: k.extra.until, strikes: k.extra.strikes}, &price{unit: true})
	}
	return b
}

func appendFingerprint(b []byte, f fingerprint) []byte {
	b = append(b, boolByte(f.cut))
	b = snapshot.AppendUvarint(b, uint64(len(f.h)))
	var prev uint32
	for _, h := range f.h {
		b = snapshot.AppendUvarint(b, uint64(h-prev))
		prev = h
	}
	return b
}

// readFingerprint reads what appendFingerprint wrote: at most simK
// hashes, ascending, none twice, simK of them if cut.
func readFingerprint(r *snapshot.Reader) fingerprint {
	f := fingerprint{cut: readBool(r, "a fingerprint neither cut nor not")}
	n := int(r.UvarintUpTo(simK, "pair hashes"))
	if f.cut && n != simK {
		r.Fail("a cut fingerprint of %d hashes, not %d", n, simK)
	}
	if r.Err() != nil {
		return fingerprint{}
	}
	f.h = make([]uint32, 0, n)
	prev := uint64(0)
	for i := range n {
		d := r.UvarintUpTo(math.MaxUint32-prev, "as a pair hash")
		if i > 0 && d == 0 {
			r.Fail("a pair hash twice")
		}
		prev += d
		f.h = append(f.h, uint32(prev))
	}
	return f
}

// readBool reads a byte that must be 0 or 1; else it fails with what.
func readBool(r *snapshot.Reader, what string) bool {
	switch r.Byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.Fail("%s", what)
	return false
}

func (t *simStore) loadState(r *snapshot.Reader, hk *hashKey, mark bool, _ byte) (store, error) {
	nt := &simStore{limit: t.limit, w: t.w, sim: t.sim, minChars: t.minChars, scope: t.scope, hk: hk, max: t.max, keys: map[string]*simKey{}, rule: t.rule}
	if v := r.Byte(); r.Err() == nil && v != simStateVersion {
		return nil, fmt.Errorf("similar state version %d, not %d", v, simStateVersion)
	}
	n := int(r.UvarintUpTo(uint64(t.max), "keys"))
	nt.evicted, nt.expired = r.Uvarint(), r.Uvarint()
	nt.ids = readBool(r, "ids neither remembered nor not")
	for j := range n {
		if r.Err() != nil {
			break
		}
		if err := nt.loadKey(r, mark); err != nil {
			return nil, fmt.Errorf("key %d of %d: %w", j, n, err)
		}
	}
	if r.Err() != nil {
		return nil, r.Err()
	}
	return nt, nil
}

// loadKey reads one key and adds it at the head of the list.
func (t *simStore) loadKey(r *snapshot.Reader, mark bool) error {
	flags := r.Byte()
	if flags&^(simMarked|simExtra) != 0 {
		r.Fail("flags %#x", flags)
	}
	k := &simKey{name: string(r.Bytes()), since: chat.Never}
	if flags&simMarked != 0 {
		if !mark {
			r.Fail("a key of a shadow policy is marked")
		}
		if k.since = r.Varint(); k.since == chat.Never {
			r.Fail("marked at chat.Never")
		}
		k.wave = readFingerprint(r)
	}
	k.newest = r.Varint()
	groups := r.Count(2, "groups")
	for range groups {
		f := readFingerprint(r)
		if r.Err() != nil {
			return r.Err()
		}
		if len(f.h) == 0 {
			return fmt.Errorf("a group of no pair")
		}
		if t.identical(k, f) >= 0 {
			return fmt.Errorf("a fingerprint twice")
		}
		t.addGroup(k, f)
	}
	recs := r.Count(10, "messages")
	if recs > 0 {
		k.recs = make([]simRec, 0, recs)
	}
	next := uint64(0) // groups are numbered in the order of their first message
	for range recs {
		g := r.UvarintUpTo(uint64(groups), "as a group")
		d := r.UvarintUpTo(uint64(k.newest)^1<<63, "ms before the newest") // k.newest - chat.Never
		user := hash64(r)
		if r.Err() != nil {
			return r.Err()
		}
		if g > next || g == uint64(groups) {
			return fmt.Errorf("group %d of %d, where the first new one is %d", g, groups, next)
		}
		if g == next {
			next++
		}
		at := int64(uint64(k.newest) - d)
		k.groups[g].push(member{at: at, user: user})
		k.recs = append(k.recs, simRec{at: at, g: int32(g)})
	}
	for gi := range k.groups {
		if k.groups[gi].count == 0 {
			return fmt.Errorf("group %d has no message", gi)
		}
	}
	if k.newest == chat.Never && recs > 0 {
		return fmt.Errorf("messages, but no newest instant")
	}
	ids := r.Count(10, "ids")
	prev := uint64(0)
	for range ids {
		id := hash64(r)
		h := simID{at: r.Varint()}
		h.consumed = readBool(r, "an id neither consumed nor not")
		if r.Err() != nil {
			return r.Err()
		}
		if id <= prev || id&1 == 0 {
			return fmt.Errorf("id hash %#x not above the one before, or not one idHash makes", id)
		}
		prev = id
		k.remember(id, h)
	}
	if flags&simExtra != 0 {
		k.extra = readKeyExtra(r, 0, &price{unit: true})
	}
	if r.Err() != nil {
		return r.Err()
	}
	if _, dup := t.keys[k.name]; dup {
		return fmt.Errorf("%q twice", k.name)
	}
	t.keys[k.name] = k
	t.pushHead(k)
	return nil
}

// carry returns a store of settings s holding t's keys, in the same order,
// marked only if mark: the store of t's policy once its limit, similarity,
// mode or rooms changed (Set.Reconfigure). Its index is made anew, since
// a new similarity indexes long texts by more of their hashes.
func (t *simStore) carry(s settings, mark bool) *simStore {
	t.mu.Lock()
	defer t.mu.Unlock()
	nt := newSimStore(s, t.scope, t.max, t.hk)
	nt.evicted, nt.expired, nt.ids = t.evicted, t.expired, t.ids
	for k := t.tail; k != nil; k = k.prev {
		nk := &simKey{name: k.name, since: k.since, wave: k.wave, newest: k.newest}
		if !mark {
			nk.since, nk.wave = chat.Never, fingerprint{}
		}
		nt.refill(nk, k.recs[k.head:], k.groups, k.hashes.h)
		for id, h := range k.ids {
			nk.remember(id, h)
		}
		if k.extra != nil {
			nk.extra = &keyExtra{until: k.extra.until, strikes: slices.Clone(k.extra.strikes)}
		}
		nt.keys[nk.name] = nk
		nt.pushHead(nk)
	}
	return nt
}
