package throttle

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/snapshot"
)

// A spike policy's part of a saved state is its own (its store is not a
// table), the same in formats 1 and 2; the policy's text (describe) says
// it is a spike's, so a build without spikes refuses it as another
// policy's. Every number is a varint, the users' and ids' hashes 8 bytes
// little-endian:
//
//	rooms     how many, how many the cap evicted, how many expired,
//	          1 if the ids of hits are remembered (else 0)
//	then each room, in the order of its list, cold end first:
//	  name    (length, bytes)
//	  since   when it crossed; chat.Never when not marked
//	  last    its newest bucket
//	  past    how many buckets, then each one's distance from the one
//	          before (the first's from last-N), and its count
//	  recent  how many messages, then each one's bucket's distance from
//	          the one before (the first's from last-n), and its user's hash
//	  ids     if they are remembered: the newest instant an id was
//	          remembered at (chat.Never: none), how many, then each
//	          one's hash, instant, and 1 and its user's hash if a
//	          consuming check's (else 0)
//
// A room's users are its recent messages' users: they are not saved.

// copyState copies the rooms under the lock, all but their users, which
// the copy's encoding does not need.
func (s *spikeStore) copyState() (bool, func(b []byte, format byte) []byte) {
	s.mu.Lock()
	c := &spikeStore{rule: s.rule, max: s.max, evicted: s.evicted, expired: s.expired, ids: s.ids, rooms: map[string]*spikeRoom{}}
	for r := s.tail; r != nil; r = r.prev {
		c.add(&spikeRoom{name: r.name, since: r.since, last: r.last, past: slices.Clone(r.past), recent: slices.Clone(r.recent), ids: maps.Clone(r.ids), idsNewest: r.idsNewest})
	}
	s.mu.Unlock()
	return false, func(b []byte, _ byte) []byte { return c.appendRooms(b) }
}

func (s *spikeStore) appendRooms(b []byte) []byte {
	b = snapshot.AppendUvarint(b, uint64(len(s.rooms)))
	b = snapshot.AppendUvarint(b, s.evicted)
	b = snapshot.AppendUvarint(b, s.expired)
	b = append(b, boolByte(s.ids))
	for r := s.tail; r != nil; r = r.prev {
		b = snapshot.AppendString(b, r.name)
		b = snapshot.AppendVarint(b, r.since)
		b = snapshot.AppendVarint(b, r.last)
		b = snapshot.AppendUvarint(b, uint64(len(r.past)))
		prev := r.last - s.rule.span
		for _, c := range r.past {
			b = snapshot.AppendUvarint(b, uint64(c.b-prev))
			b = snapshot.AppendUvarint(b, uint64(c.n))
			prev = c.b
		}
		b = snapshot.AppendUvarint(b, uint64(len(r.recent)))
		prev = r.last - s.rule.n
		for _, p := range r.recent {
			b = snapshot.AppendUvarint(b, uint64(p.b-prev))
			b = binary.LittleEndian.AppendUint64(b, p.user)
			prev = p.b
		}
		if !s.ids {
			continue
		}
		b = snapshot.AppendVarint(b, r.idsNewest)
		b = snapshot.AppendUvarint(b, uint64(len(r.ids)))
		for _, id := range slices.Sorted(maps.Keys(r.ids)) { // sorted: a state saves as the same bytes
			x := r.ids[id]
			b = binary.LittleEndian.AppendUint64(b, id)
			b = snapshot.AppendVarint(b, x.at)
			b = append(b, boolByte(x.consumed))
			if x.consumed {
				b = binary.LittleEndian.AppendUint64(b, x.user)
			}
		}
	}
	return b
}

// loadState reads the rooms into a new store, each checked before it is
// added (at the head of the list, as a new room is), no more than max of
// them, nor more of anything than the bytes left can hold.
func (s *spikeStore) loadState(r *snapshot.Reader, _ *hashKey, mark bool, _ byte) (store, error) {
	ns := newSpikeStore(s.rule, s.max)
	n := int(r.UvarintUpTo(uint64(s.max), "rooms"))
	ns.evicted, ns.expired = r.Uvarint(), r.Uvarint()
	switch r.Byte() {
	case 0:
	case 1:
		ns.ids = true
	default:
		r.Fail("ids neither remembered nor not")
	}
	for j := 0; j < n && r.Err() == nil; j++ {
		room := ns.readRoom(r, mark)
		if r.Err() != nil {
			return nil, fmt.Errorf("room %d of %d: %w", j, n, r.Err())
		}
		ns.add(room)
	}
	if r.Err() != nil {
		return nil, r.Err()
	}
	return ns, nil
}

// readRoom reads one room, failing r unless it is one that messages and
// checks can make: its buckets in its spans and in order, every count at
// least 1, its ids' hashes ones that idHash makes.
func (s *spikeStore) readRoom(r *snapshot.Reader, mark bool) *spikeRoom {
	k := &s.rule
	room := &spikeRoom{name: string(r.Bytes()), since: r.Varint(), last: period(r, k.res), idsNewest: chat.Never}
	switch {
	case r.Err() != nil:
		return nil
	case s.rooms[room.name] != nil:
		r.Fail("room %q twice", room.name)
	case room.since != chat.Never && !mark:
		r.Fail("a room of a shadow policy is marked")
	}
	n := r.Count(2, "buckets")
	if n > 0 && (room.last == chat.Never || n > int(k.span-k.n)) {
		r.Fail("%d buckets in a baseline span of %d", n, k.span-k.n)
	}
	prev := room.last - k.span
	for range n {
		b := prev + int64(r.UvarintUpTo(uint64(k.span), "buckets"))
		c := r.Uvarint32()
		switch {
		case r.Err() != nil:
			return nil
		case b <= prev || b > room.last-k.n:
			r.Fail("bucket %d out of the baseline span (%d, %d] or out of order", b, prev, room.last-k.n)
			return nil
		case c == 0:
			r.Fail("an empty bucket among those that hold messages")
			return nil
		}
		room.past = append(room.past, bucketCount{b: b, n: c})
		room.base += int64(c)
		prev = b
	}
	n = r.Count(9, "messages")
	if n > 0 && room.last == chat.Never {
		r.Fail("messages in a room with no newest bucket")
	}
	prev = room.last - k.n
	for i := range n {
		b := prev + int64(r.UvarintUpTo(uint64(k.n), "buckets"))
		user := hash64(r)
		switch {
		case r.Err() != nil:
			return nil
		case i == 0 && b == prev || b > room.last:
			r.Fail("a message of bucket %d out of the window (%d, %d]", b, room.last-k.n, room.last)
			return nil
		}
		room.recent = append(room.recent, post{b: b, user: user})
		room.users.add(user, b, room.last-k.n)
		prev = b
	}
	if !s.ids {
		return room
	}
	room.idsNewest = r.Varint()
	n = r.Count(10, "ids")
	for range n {
		id := hash64(r)
		x := spikeID{at: r.Varint()}
		switch r.Byte() {
		case 0:
		case 1:
			x.consumed, x.user = true, hash64(r)
		default:
			r.Fail("an id neither consumed nor not")
		}
		switch _, twice := room.ids[id]; {
		case r.Err() != nil:
			return nil
		case id&1 == 0:
			r.Fail("an id hash %#x that idHash does not make", id)
			return nil
		case twice:
			r.Fail("id %#x twice", id)
			return nil
		case x.at > room.idsNewest:
			r.Fail("an id of %d, after the newest, %d", x.at, room.idsNewest)
			return nil
		}
		if room.ids == nil {
			room.ids = make(map[uint64]spikeID)
		}
		room.ids[id] = x
	}
	room.idsKept = len(room.ids)
	return room
}

// hash64 reads a hash of 8 bytes, little-endian (0 if r fails).
func hash64(r *snapshot.Reader) uint64 {
	if p := r.Next(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// carry returns a store of rule k holding copies of s's rooms, in the same
// order, marked only if mark, with its counts of evicted and expired
// rooms: the store of s's policy once its settings changed but not its
// window, resolution or baseline (Set.Reconfigure). s stays as it was.
func (s *spikeStore) carry(k spikeRule, mark bool) *spikeStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := newSpikeStore(k, s.max)
	ns.evicted, ns.expired, ns.ids = s.evicted, s.expired, s.ids
	for r := s.tail; r != nil; r = r.prev {
		c := &spikeRoom{name: r.name, since: r.since, last: r.last, past: slices.Clone(r.past), base: r.base,
			recent: slices.Clone(r.recent), users: r.users.clone(), ids: maps.Clone(r.ids), idsNewest: r.idsNewest, idsKept: r.idsKept}
		if !mark {
			c.since = chat.Never
		}
		ns.add(c)
	}
	return ns
}
