package throttle

import (
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/chatpulse/chatpulse/chat"
)

// spikeStore is the store of a spike policy: its rooms by name, in a
// list from the most to the least recently observed. It keeps rooms as a
// table keeps keys: one at rest (nothing left in its baseline, no id
// remembered) is forgotten, a little at a time as new rooms come and all
// at once by Sweep, since that changes no answer; past the cap (max), a
// new room evicts the least recently observed, at rest or not. One mutex
// guards it all.
type spikeStore struct {
	rule spikeRule
	max  int

	mu    sync.Mutex
	rooms map[string]*spikeRoom
	peak  int // the most rooms since the map was made: a Go map never shrinks
	lru[spikeRoom, *spikeRoom]
	evicted uint64
	expired uint64
	// ids: a consuming check has come (consume.go), so the ids of the
	// hits are remembered.
	ids bool
}

// A spikeRoom is the state of one room, exact and no larger than what its
// windows hold: the window's messages, each with its user's keyed hash
// (16 bytes a message), an entry for each of the window's users (see
// windowUsers), and the baseline span's buckets that hold messages (16
// bytes a bucket, at most N-n of them). Keeping each message's user is
// what lets a consuming check that a group takes back be taken back
// exactly, and a snapshot hold no more than the messages.
type spikeRoom struct {
	name  string
	since int64 // the alert mark: when it crossed; chat.Never when not
	last  int64 // the newest bucket; chat.Never before the first message
	// past are the buckets of the baseline span, (last-N, last-n], that
	// hold messages, oldest first, and base is their sum.
	past []bucketCount
	base int64
	// recent are the window's messages, (last-n, last], by bucket (ties
	// in the order they came); users are their distinct users.
	recent []post
	// buf is the array recent lies in (nil: not known), dead the slots
	// before recent in it, of messages that left the window (see grow).
	buf   []post
	dead  int
	users windowUsers
	// ids are the recent hits' ids (by their keyed hashes) while the
	// store remembers them; idsNewest is the newest instant among them
	// (chat.Never: none yet), and idsKept how many the last pruning kept.
	ids       map[uint64]spikeID
	idsNewest int64
	idsKept   int
	lruLinks[spikeRoom]
}

func (r *spikeRoom) links() *lruLinks[spikeRoom] { return &r.lruLinks }

type bucketCount struct {
	b int64
	n uint32
}

type post struct {
	b    int64
	user uint64
}

func newSpikeStore(r spikeRule, max int) *spikeStore {
	return &spikeStore{rule: r, max: max, rooms: map[string]*spikeRoom{}}
}

// find returns the room called name, or nil.
func (s *spikeStore) find(name string) *spikeRoom { return s.rooms[name] }

// room returns the room called name, adding it fresh if need be, evicting
// first, as table.insert does: up to two rooms at rest at `at` from the
// cold end, then the coldest if the store is full.
func (s *spikeStore) room(name string, at int64) *spikeRoom {
	if r := s.rooms[name]; r != nil {
		return r
	}
	for range 2 {
		if s.tail == nil || !s.atRest(s.tail, at) {
			break
		}
		s.remove(s.tail)
		s.expired++
	}
	if len(s.rooms) >= s.max {
		s.remove(s.tail)
		s.evicted++
	}
	r := &spikeRoom{name: strings.Clone(name), since: chat.Never, last: chat.Never, idsNewest: chat.Never}
	s.add(r)
	return r
}

// add puts r at the head of the list.
func (s *spikeStore) add(r *spikeRoom) {
	s.rooms[r.name] = r
	s.peak = max(s.peak, len(s.rooms))
	s.pushHead(r)
}

func (s *spikeStore) remove(r *spikeRoom) {
	s.unlink(r)
	delete(s.rooms, r.name)
}

// atRest reports whether r is the same as a fresh room at now: no
// message left in its baseline, no id remembered.
func (s *spikeStore) atRest(r *spikeRoom, now int64) bool {
	if r.holds() && s.rule.bucket(now)-r.newest() < s.rule.span {
		return false
	}
	for _, x := range r.ids {
		if x.at > max(now, r.idsNewest)-s.rule.window {
			return false
		}
	}
	return true
}

// holds reports whether r holds a message; newest is the bucket of its
// newest, if it does.
func (r *spikeRoom) holds() bool { return len(r.recent) > 0 || len(r.past) > 0 }

func (r *spikeRoom) newest() int64 {
	if n := len(r.recent); n > 0 {
		return r.recent[n-1].b
	}
	return r.past[len(r.past)-1].b
}

// catchUp moves r to bucket b, if b is newer than its newest: the
// window's messages that leave it go to the baseline span, and the span's
// that leave it are dropped. It is the only place where a room's clock
// moves. A room left holding nothing starts over: its mark is cleared,
// as a room forgotten at rest would have none.
func (k *spikeRule) catchUp(r *spikeRoom, b int64) {
	if r.last != chat.Never && b <= r.last {
		return
	}
	if r.last == chat.Never || b-r.last >= k.span {
		r.past, r.base, r.recent = r.past[:0], 0, r.recent[:0]
		r.users.reset()
	} else {
		i := 0
		for ; i < len(r.recent) && r.recent[i].b <= b-k.n; i++ {
			p := r.recent[i]
			if n := len(r.past); n > 0 && r.past[n-1].b == p.b {
				r.past[n-1].n = satAdd(r.past[n-1].n, 1)
			} else {
				r.past = append(r.past, bucketCount{b: p.b, n: 1})
			}
			r.base++
		}
		r.users.leave(b - k.n)
		r.recent, r.dead = r.recent[i:], r.dead+i
		j := 0
		for ; j < len(r.past) && r.past[j].b <= b-k.span; j++ {
			r.base -= int64(r.past[j].n)
		}
		r.past = r.past[j:]
	}
	if cap(r.buf) >= 256 && len(r.recent) < cap(r.buf)/8 { // give a flood's memory back
		r.recent, r.buf, r.dead = slices.Clone(r.recent), nil, 0
	}
	r.last = b
	if !r.holds() {
		r.since = chat.Never
	}
}

// resized is a copy of m in a map sized for it.
func resized[K comparable, V any](m map[K]V) map[K]V {
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// add counts a message of user at bucket b, which catchUp has reached
// (b <= last): in the window, in the baseline span, or, older than both,
// nowhere, since no later read could count it.
func (k *spikeRule) add(r *spikeRoom, b int64, user uint64) {
	switch {
	case b <= r.last-k.span:
	case b <= r.last-k.n:
		i := sort.Search(len(r.past), func(i int) bool { return r.past[i].b >= b })
		switch {
		case i < len(r.past) && r.past[i].b == b:
			if r.past[i].n == math.MaxUint32 {
				return
			}
			r.past[i].n++
		default:
			r.past = slices.Insert(r.past, i, bucketCount{b: b, n: 1})
		}
		r.base++
	default:
		r.grow()
		p, n := post{b: b, user: user}, len(r.recent)
		// A user posting again in the newest bucket (a flood) has its
		// newest message there already: no lookup.
		again := n > 0 && r.recent[n-1] == p
		if n == 0 || r.recent[n-1].b <= b { // most messages are of the newest bucket
			r.recent = append(r.recent, p)
		} else {
			i := sort.Search(n, func(i int) bool { return r.recent[i].b > b })
			r.recent = slices.Insert(r.recent, i, p)
		}
		if !again {
			r.users.add(user, b, r.last-k.n)
		}
	}
}

// grow makes room for one more message at the end of r.recent without
// moving the window to a new array each time it reaches the end of its
// own, as append would: once the slots before it (of messages that left
// the window) are at least half as many as it holds, it moves down to
// the array's start, so it copies at most two messages for each one that
// left, and a window of steady size allocates nothing.
func (r *spikeRoom) grow() {
	switch {
	case len(r.recent) < cap(r.recent):
		return
	case r.buf != nil && r.dead > 0 && r.dead >= len(r.recent)/2:
		r.recent = r.buf[:copy(r.buf[:cap(r.buf)], r.recent)]
	default:
		r.buf = make([]post, len(r.recent), 2*len(r.recent)+8)
		copy(r.buf, r.recent)
		r.recent = r.buf
	}
	r.dead = 0
}

// counts are what r holds at bucket b (b >= last: a read at an earlier
// bucket reads at last). It is pure: r is not changed.
func (k *spikeRule) counts(r *spikeRoom, b int64) spikeCounts {
	if r.last == chat.Never || b-r.last >= k.span {
		return spikeCounts{}
	}
	if b <= r.last {
		return spikeCounts{w: int64(len(r.recent)), u: r.users.n, b: r.base}
	}
	// The window's messages of buckets up to b-n leave it for the span,
	// and the span's of buckets up to b-N leave it.
	i := sort.Search(len(r.recent), func(i int) bool { return r.recent[i].b > b-k.n })
	gone := sort.Search(i, func(j int) bool { return r.recent[j].b > b-k.span })
	c := spikeCounts{w: int64(len(r.recent) - i), u: r.users.n - r.users.leaving(b-k.n), b: r.base + int64(i-gone)}
	for j := 0; j < len(r.past) && r.past[j].b <= b-k.span; j++ {
		c.b -= int64(r.past[j].n)
	}

	return c
}

// hit records one message (or, if a consuming check counted its id
// already, only its instant) and decides it at the room's newest instant:
// the crossing (j 0) if the room is over and was not marked, none (j -1)
// otherwise. A room that is not over is unmarked.
func (s *spikeStore) hit(m *msg, mark bool) crossing {
	k := &s.rule
	r := s.room(m.room, m.at)
	s.touch(r)
	b := k.bucket(m.at)
	k.catchUp(r, b)
	remember := s.ids && m.id != 0
	if !remember || !k.counted(r, m.id, m.at, true) {
		k.add(r, b, m.userHash)
		if remember {
			k.remember(r, m.id, spikeID{at: m.at})
		}
	}
	c := spikeCounts{w: int64(len(r.recent)), u: r.users.n, b: r.base}
	switch {
	case !k.over(c):
		r.since = chat.Never
	case mark && r.since == chat.Never:
		r.since = m.at
		v := k.verdict(c)
		return crossing{count: v.Count, limit: v.Limit, denied: m.at, spike: v.spike}
	}
	return crossing{j: -1}
}

func (s *spikeStore) observe(m msg, mark bool) crossing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hit(&m, mark)
}

func (s *spikeStore) observeAll(ms []msg, sel []int32, mark bool, out *[]crossing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range sel {
		if c := s.hit(&ms[j], mark); c.j >= 0 {
			c.j = int(j)
			*out = append(*out, c)
		}
	}
}

// check is the room's verdict at m.at: not Allowed while the room is
// over (for waveHolds; a spike is in no decision).
func (s *spikeStore) check(m msg) Verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verdictOf(m.room, m.at)
}

func (s *spikeStore) verdictOf(room string, now int64) Verdict {
	r := s.find(room)
	if r == nil {
		return s.rule.verdict(spikeCounts{})
	}
	return s.rule.verdict(s.rule.counts(r, max(s.rule.bucket(now), r.last)))
}

func (s *spikeStore) active(now int64, fn func(room, user string, v Verdict, since, until int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := s.head; r != nil; r = r.next {
		if r.since == chat.Never {
			continue
		}
		if v := s.rule.verdict(s.rule.counts(r, max(s.rule.bucket(now), r.last))); !v.Allowed {
			fn(r.name, "", v, r.since, 0)
		}
	}
}

func (s *spikeStore) sweep(now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	gone := 0
	for r := s.tail; r != nil; {
		prev := r.prev
		if s.atRest(r, now) {
			s.remove(r)
			gone++
		}
		r = prev
	}
	s.expired += uint64(gone)
	if s.peak >= 1024 && len(s.rooms) < s.peak/4 {
		s.rooms, s.peak = resized(s.rooms), len(s.rooms)
	}
	return gone
}

func (s *spikeStore) stats() (keys int, evicted, expired uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rooms), s.evicted, s.expired
}

func (s *spikeStore) addCounts(evicted, expired uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evicted += evicted
	s.expired += expired
}

// setRule: a spike keeps no extras (no penalty, no act); its ids are
// remembered for its window, which its rule has.
func (s *spikeStore) setRule(extraRule) {}
