package throttle

// What a spike's store does for consuming checks (consume.go) and their
// take-backs: the ids of the hits, remembered for the policy's window.

import (
	"slices"
	"sort"
)

// A spikeID is a hit that carried an id: when, whether a consuming
// check's (one that an event's hit with the same id does not count
// again) or an event's, and for a consuming check, its user's hash, which
// a take-back must name.
type spikeID struct {
	at       int64
	user     uint64
	consumed bool
}

// take1 takes back one message of user at bucket b, if it is still held.
func (k *spikeRule) take1(r *spikeRoom, b int64, user uint64) {
	switch {
	case b <= r.last-k.span:
	case b <= r.last-k.n:
		i := sort.Search(len(r.past), func(i int) bool { return r.past[i].b >= b })
		if i < len(r.past) && r.past[i].b == b {
			r.base--
			if r.past[i].n--; r.past[i].n == 0 {
				r.past = slices.Delete(r.past, i, i+1)
			}
		}
	default:
		for i := len(r.recent) - 1; i >= 0 && r.recent[i].b >= b; i-- {
			if r.recent[i] == (post{b: b, user: user}) {
				r.recent = slices.Delete(r.recent, i, i+1)
				r.users.take(user, b, r.last-k.n, r.recent)
				return
			}
		}
	}
}

// counted reports whether r counted a hit with id within the window
// before at: a consuming check's only, or any. An id is remembered for a
// window, until a hit with an id a window newer: so whether the map still
// holds an id older than that, which remember drops only now and then,
// changes nothing.
func (k *spikeRule) counted(r *spikeRoom, id uint64, at int64, consumedOnly bool) bool {
	x, ok := r.ids[id]
	return ok && x.at > max(at, r.idsNewest)-k.window && (x.consumed || !consumedOnly)
}

// remember keeps the id of a hit at `at`, forgetting those a window older
// once the ids have doubled since the last time (so each is looked at a
// bounded number of times).
func (k *spikeRule) remember(r *spikeRoom, id uint64, x spikeID) {
	if r.ids == nil {
		r.ids = make(map[uint64]spikeID)
	}
	r.idsNewest = max(r.idsNewest, x.at)
	if len(r.ids) >= 2*r.idsKept+16 {
		kept := make(map[uint64]spikeID, len(r.ids))
		for i, y := range r.ids {
			if y.at > x.at-k.window {
				kept[i] = y
			}
		}
		r.ids, r.idsKept = kept, len(kept)
	}
	r.ids[id] = x
}

// remembersIDs: a consuming check has come, so the ids of hits are kept.
func (s *spikeStore) remembersIDs() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids
}

// A spike in a consuming check (docs/contract.md section 10): it decides
// nothing, so it never denies and never makes a check one counted before
// (counted is false: a spike's longer memory must not change what the
// other policies record); an allowed check's message is one more of the
// room's, unless the room counted its id already.

func (s *spikeStore) lock()   { s.mu.Lock() }
func (s *spikeStore) unlock() { s.mu.Unlock() }

func (s *spikeStore) counted(msg) bool { return false }

func (s *spikeStore) verdict(m msg) Verdict { return Verdict{Allowed: true} }

func (s *spikeStore) refuse(msg, bool) crossing { return crossing{j: -1} }

func (s *spikeStore) take(m msg) {
	s.ids = true
	k := &s.rule
	r := s.room(m.room, m.at)
	s.touch(r)
	if k.counted(r, m.id, m.at, false) {
		return
	}
	b := k.bucket(m.at)
	k.catchUp(r, b)
	k.add(r, b, m.userHash)
	k.remember(r, m.id, spikeID{at: m.at, user: m.userHash, consumed: true})
}

func (s *spikeStore) untake(m msg) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.find(m.room)
	if r == nil {
		return false
	}
	x, ok := r.ids[m.id]
	if !ok || !x.consumed || x.user != m.userHash || x.at <= r.idsNewest-s.rule.window { // another's, or forgotten if not dropped yet
		return false
	}
	delete(r.ids, m.id)
	s.rule.take1(r, s.rule.bucket(x.at), m.userHash)
	return true
}
