package throttle

import (
	"encoding/binary"
	"strings"
	"unsafe"
)

// Scope says whose messages share one counter.
type Scope string

// The scopes of docs/contract.md section 5.
const (
	ScopeUser       Scope = "user"         // one counter per user, across rooms
	ScopeRoom       Scope = "room"         // one counter per room, across users
	ScopeUserInRoom Scope = "user_in_room" // one counter per user and room
	ScopeGroup      Scope = "group"        // one counter for all the rooms the policy sees
)

// Which of a message's names make a key.
const (
	keyGroup uint8 = iota
	keyUser
	keyRoom
	keyRoomUser
)

// A pair is the key of a hashed table.
type pair struct{ name, text uint64 }

// names are the room and user of a key, as keyOf gives them.
type names struct{ room, user string }

// keyOf is the room and user that name a message's key under a scope.
func keyOf(scope Scope, room, user string) (string, string) {
	switch scope {
	case ScopeUser:
		return "", user
	case ScopeRoom:
		return room, ""
	case ScopeUserInRoom:
		return room, user
	}
	return "", ""
}

// appendKey encodes the name of a user_in_room key: the room prefixed with
// its length, so that no two (room, user) pairs share a name, then the user.
func appendKey(b []byte, room, user string) []byte {
	b = binary.AppendUvarint(b, uint64(len(room)))
	b = append(b, room...)
	return append(b, user...)
}

// isKey reports whether name is appendKey(room, user), without building it.
func isKey(name, room, user string) bool {
	var pre [binary.MaxVarintLen64]byte
	w := binary.PutUvarint(pre[:], uint64(len(room)))
	return len(name) == w+len(room)+len(user) && name[:w] == string(pre[:w]) &&
		name[w:w+len(room)] == room && name[w+len(room):] == user
}

// splitKey is the inverse of appendKey, and of the names of the other
// scopes. Room or user is "" where the scope does not have it.
func splitKey(key string, scope Scope) (room, user string) {
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

// A key is a message's key in one table, and its hash in the index: the
// message's names for a plain table (they may alias the caller's buffers:
// insert copies what it keeps), the pair of hashes for a hashed one.
type key struct {
	room, user string
	pair       pair
	hash       uint64
}

// keyOf sets k to the key of m.
func (t *table[S, E, K]) keyOf(m *msg, k *key) {
	var h uint64
	switch t.keyPart {
	case keyUser:
		h = m.userHash
	case keyRoom:
		h = m.roomHash
	case keyRoomUser:
		h = roomUserHash(m.roomHash, m.userHash)
	default:
		h = t.groupHash
	}
	if t.hashed {
		*k = key{pair: pair{h, m.text}, hash: pairHash(h, m.text)}
		return
	}
	*k = key{room: m.room, user: m.user, hash: h}
}

// setKey stores k in e, at place i.
func (t *table[S, E, K]) setKey(e *entry[S], i int32, k *key) {
	if t.hashed {
		binary.LittleEndian.PutUint64(e.key[:8], k.pair.name)
		binary.LittleEndian.PutUint64(e.key[8:16], k.pair.text)
		return
	}
	var n int
	switch t.keyPart {
	case keyUser:
		n = len(k.user)
	case keyRoom:
		n = len(k.room)
	case keyRoomUser:
		n = binary.PutUvarint(e.key[:], uint64(len(k.room))) // the length prefix: 10 bytes at most
		n += len(k.room) + len(k.user)
	}
	if n > keyInline {
		if t.long == nil {
			t.long = make([]string, len(t.states), cap(t.states))
		}
		e.klen = longName
		t.long[i] = t.longName(k)
		return
	}
	e.klen = uint8(n)
	switch t.keyPart {
	case keyUser:
		copy(e.key[:], k.user)
	case keyRoom:
		copy(e.key[:], k.room)
	case keyRoomUser:
		w := n - len(k.room) - len(k.user)
		copy(e.key[w+copy(e.key[w:], k.room):], k.user)
	}
}

// longName returns the name of k, to keep.
func (t *table[S, E, K]) longName(k *key) string {
	switch t.keyPart {
	case keyUser:
		return strings.Clone(k.user)
	case keyRoom:
		return strings.Clone(k.room)
	}
	b := appendKey(make([]byte, 0, binary.MaxVarintLen64+len(k.room)+len(k.user)), k.room, k.user)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is not written again
}

// nameAt is the name of the key at place i of a plain table. It may alias
// the entry: it is valid only until the entry changes.
func (t *table[S, E, K]) nameAt(i int32) string {
	e := &t.states[i]
	if e.klen == longName {
		return t.long[i]
	}
	return unsafe.String(&e.key[0], int(e.klen))
}

// is reports whether place i holds k.
func (t *table[S, E, K]) is(i int32, k *key) bool {
	e := &t.states[i]
	if t.hashed {
		return binary.LittleEndian.Uint64(e.key[:8]) == k.pair.name && binary.LittleEndian.Uint64(e.key[8:16]) == k.pair.text
	}
	switch t.keyPart {
	case keyUser:
		return t.nameAt(i) == k.user
	case keyRoom:
		return t.nameAt(i) == k.room
	case keyRoomUser:
		return isKey(t.nameAt(i), k.room, k.user)
	}
	return true // a group has one key
}

// hashOf is the index hash of the key at place i, as keyOf computed it.
func (t *table[S, E, K]) hashOf(i int32) uint64 {
	if t.hashed {
		e := &t.states[i]
		return pairHash(binary.LittleEndian.Uint64(e.key[:8]), binary.LittleEndian.Uint64(e.key[8:16]))
	}
	if t.keyPart == keyRoomUser {
		room, user := splitKey(t.nameAt(i), ScopeUserInRoom)
		return roomUserHash(t.hk.nameHash(room), t.hk.nameHash(user))
	}
	return t.hk.nameHash(t.nameAt(i))
}

// roomUserHash is the hash of a user_in_room key from the hashes of its
// room and user: the odd multiplier keeps (a, b) and (b, a) apart, and a
// collision needs one of the two hashes to collide, or the mix of two
// independent random values to.
func roomUserHash(room, user uint64) uint64 { return room*0xbf58476d1ce4e5b9 ^ user }

// pairHash is the index hash of a (name, text) key of a repeat policy. Both
// parts are already uniform 64-bit hashes; the odd multiplier spreads the
// text's bits into the top bits that pick the home slot, and keeps (a, b)
// and (b, a) apart.
func pairHash(name, text uint64) uint64 { return name ^ text*0x9e3779b97f4a7c15 }
