package throttle

import (
	"strings"
	"sync"
	"time"
)

// AlgJoinWave names a raid detector in a Policy (docs/contract.md section
// 12): a sliding window, exactly as sliding_window counts, over a room's
// joins instead of its messages. It never decides a message; a room whose
// joins cross its limit alerts once per crossing, shows in Active, and
// while it holds, the policies with NewMembers apply to the room's new
// members.
const AlgJoinWave Algorithm = "join_wave"

// joinWaveAlg is the row of the join wave in the table of algorithms: the
// sliding window's kernel, fed joins.
var joinWaveAlg = algorithm{name: AlgJoinWave, resolution: true, joins: true, kernel: kernelsOf(newSlidingKernel)}

// firstPosts are when users were first seen in rooms (a join or a
// message), for the policies with NewMembers: kept for the longest
// NewMembers, and for at most maxKeys (room, user) pairs; a user not kept
// counts as new, the stricter way.
type firstPosts struct {
	mu    sync.Mutex
	first map[[2]string]int64
}

// seen records that user was in room at `at`.
func (s *Set) seen(room, user string, at int64) {
	s.first.mu.Lock()
	defer s.first.mu.Unlock()
	if s.first.first == nil {
		s.first.first = map[[2]string]int64{}
	}
	k := [2]string{room, user}
	if t, ok := s.first.first[k]; ok {
		if at < t {
			s.first.first[k] = at
		}
		return
	}
	if len(s.first.first) >= s.maxKeys {
		return
	}
	s.first.first[[2]string{strings.Clone(room), strings.Clone(user)}] = at
}

// newMember reports whether user is new in room at now: first seen less
// than d before now, or not seen.
func (s *Set) newMember(room, user string, now int64, d time.Duration) bool {
	s.first.mu.Lock()
	defer s.first.mu.Unlock()
	t, ok := s.first.first[[2]string{room, user}]
	return !ok || now-t < d.Milliseconds()
}

// sweepFirst forgets the users first seen longer ago than any policy's
// NewMembers.
func (s *Set) sweepFirst(now int64, horizon time.Duration) {
	s.first.mu.Lock()
	defer s.first.mu.Unlock()
	for k, t := range s.first.first {
		if now-t >= horizon.Milliseconds() {
			delete(s.first.first, k)
		}
	}
}

// waveHolds reports whether a join wave or a spike holds in room at now:
// some join wave policy that sees it is over its limit, or some spike
// policy finds it over.
func (st *state) waveHolds(m msg) bool {
	for pi, p := range st.policies {
		if (p.joins || p.spike) && p.sees(m.room) && !st.stores[pi].check(m).Allowed {
			return true
		}
	}
	return false
}

// applies reports whether policy p decides q at now: a policy with
// NewMembers only for a room's new members while a join wave (or a spike)
// holds there; a join wave or a spike never.
func (s *Set) applies(st *state, p *policy, q *Query, m msg, now int64) bool {
	if p.joins || p.spike {
		return false
	}
	if p.NewMembers == 0 {
		return true
	}
	return st.waveHolds(m) && s.newMember(q.Room, q.User, now, p.NewMembers)
}
