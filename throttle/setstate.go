package throttle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/chatpulse/chatpulse/snapshot"
)

// What a Set keeps beside its policies' keys, and saves with them from
// format 3 on: the last posts under slow mode (actions.go) and the first
// sightings for NewMembers (joinwave.go). Neither follows from the
// policies' keys, and a replay from a snapshot reads only what came
// after it, so both must be in the snapshot: a user who posted under slow
// mode just before a restart is still denied after it, and a user seen
// before it is not new after it.
//
// In the state, after the last policy:
//
//	slow posts  how many, then each: room, user (length, bytes), at
//	first seen  how many, then each: room, user (length, bytes), at
//
// each list sorted by room and user, so that a state is the same bytes
// whatever the order of the maps.

// A sighting is when user was last (slow posts) or first (first seen) in
// room.
type sighting struct {
	room, user string
	at         int64
}

// copySightings copies m, under mu (which the caller holds).
func copySightings(m map[[2]string]int64) []sighting {
	out := make([]sighting, 0, len(m))
	for k, at := range m {
		out = append(out, sighting{k[0], k[1], at})
	}
	return out
}

// appendSightings appends ss, sorted, in format.
func appendSightings(b []byte, ss []sighting) []byte {
	slices.SortFunc(ss, func(x, y sighting) int {
		return cmp.Or(strings.Compare(x.room, y.room), strings.Compare(x.user, y.user))
	})
	b = snapshot.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = snapshot.AppendString(b, s.room)
		b = snapshot.AppendString(b, s.user)
		b = snapshot.AppendVarint(b, s.at)
	}
	return b
}

// readSightings reads what appendSightings wrote: at most most of them,
// each (room, user) once and in order.
func readSightings(r *snapshot.Reader, most int, what string) (map[[2]string]int64, error) {
	n := r.Count(3, what)
	if r.Err() == nil && n > most {
		return nil, fmt.Errorf("%d %s, more than %d", n, what, most)
	}
	m := make(map[[2]string]int64, n)
	var prev [2]string
	for i := range n {
		k := [2]string{string(r.Bytes()), string(r.Bytes())}
		at := r.Varint()
		if r.Err() != nil {
			break
		}
		if k[0] == "" || k[1] == "" {
			return nil, fmt.Errorf("%s %d: an empty name", what, i)
		}
		if i > 0 && cmp.Or(strings.Compare(prev[0], k[0]), strings.Compare(prev[1], k[1])) >= 0 {
			return nil, fmt.Errorf("%s %d: not after the one before", what, i)
		}
		m[k], prev = at, k
	}
	return m, r.Err()
}

// sightings is a copy of the Set's slow posts and first sightings.
type sightings struct{ slow, first []sighting }

// copySightings copies the Set's slow posts and first sightings.
func (s *Set) copySightings() sightings {
	s.slow.mu.Lock()
	slow := copySightings(s.slow.last)
	s.slow.mu.Unlock()
	s.first.mu.Lock()
	first := copySightings(s.first.first)
	s.first.mu.Unlock()
	return sightings{slow, first}
}

func (c sightings) empty() bool { return len(c.slow) == 0 && len(c.first) == 0 }

func (c sightings) append(b []byte) []byte {
	return appendSightings(appendSightings(b, c.slow), c.first)
}

// readSightings reads the Set's slow posts and first sightings, at most
// as many of each as the Set keeps (maxKeys).
func (s *Set) readSightings(r *snapshot.Reader) (slow, first map[[2]string]int64, err error) {
	if slow, err = readSightings(r, s.maxKeys, "slow posts"); err != nil {
		return nil, nil, err
	}
	if first, err = readSightings(r, s.maxKeys, "first sightings"); err != nil {
		return nil, nil, err
	}
	return slow, first, nil
}

// setSightings replaces the Set's slow posts and first sightings.
func (s *Set) setSightings(slow, first map[[2]string]int64) {
	s.slow.mu.Lock()
	s.slow.last = slow
	s.slow.mu.Unlock()
	s.first.mu.Lock()
	s.first.first = first
	s.first.mu.Unlock()
}
