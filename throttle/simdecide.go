package throttle

import (
	"cmp"
	"slices"

	"github.com/chatpulse/chatpulse/chat"
)

// How a similar policy decides, records and answers: the store methods of
// simStore (simstore.go keeps its windows).

// judge is the verdict of k (nil: a key never seen) for a message of
// fingerprint f (has: it has one) at now, its penalty included.
func (t *simStore) judge(k *simKey, f fingerprint, has bool, now int64) Verdict {
	v := allowed(0, t.limit)
	if has && k != nil {
		v = t.count(k, f, now)
	}
	if k == nil {
		return v
	}
	return k.extra.penalty(v, now)
}

// count decides a message of fingerprint f at now by the alike messages
// of k's window: for scope room, one per distinct user, at the user's
// newest; for scope user, every one. It is denied once limit of them are
// in the window, and allowed again once the limit-th newest leaves it.
func (t *simStore) count(k *simKey, f fingerprint, now int64) Verdict {
	t.need = 0
	t.gather(k, f, max(now, k.newest))
	found := t.found
	if t.scope == ScopeRoom && len(found) > 1 {
		// Each user once, at its newest.
		slices.SortFunc(found, func(a, b member) int { return cmp.Or(cmp.Compare(a.user, b.user), cmp.Compare(b.at, a.at)) })
		found = slices.CompactFunc(found, func(a, b member) bool { return a.user == b.user })
	}
	t.found = found[:0]
	n := int64(len(found))
	if n < t.limit {
		return allowed(n, t.limit)
	}
	slices.SortFunc(found, func(a, b member) int { return cmp.Compare(b.at, a.at) })
	return denied(n, t.limit, found[t.limit-1].at+t.w-now)
}

// gather puts in t.found the messages of k's window at `at` alike to f:
// all of them, or, if t.need is set, until they are enough to deny
// (t.enough: need distinct users for scope room, need messages for scope
// user).
func (t *simStore) gather(k *simKey, f fingerprint, at int64) {
	t.stamp++
	t.found, t.users, t.enough = t.found[:0], t.users[:0], false
	t.ixKeys = f.keys(t.sim, t.ixKeys[:0])
	for _, x := range t.ixKeys {
		for _, gi := range t.indexed(k, x) {
			if t.enough {
				return
			}
			t.visit(k, gi, f, at)
		}
	}
}

// visit compares group gi of k with f, once per gather, and adds its
// messages in the window at `at` to t.found if alike.
func (t *simStore) visit(k *simKey, gi int32, f fingerprint, at int64) {
	g := &k.groups[gi]
	if g.seen == t.stamp {
		return
	}
	g.seen = t.stamp
	if !alike(f, k.fp(g), t.sim) {
		return
	}
	members := g.members()
	for i := len(members) - 1; i >= 0; i-- {
		m := members[i]
		if m.at <= at-t.w {
			continue
		}
		t.found = append(t.found, m)
		if t.need == 0 {
			continue
		}
		if t.scope == ScopeRoom && !slices.Contains(t.users, m.user) {
			t.users = append(t.users, m.user)
		}
		if t.scope == ScopeRoom && len(t.users) >= t.need || t.scope == ScopeUser && len(t.found) >= t.need {
			t.enough = true
			return
		}
	}
}

// over reports whether a message of fingerprint f (has: it has one) at
// now would be denied by k (nil: a key never seen), as judge's verdict
// says, with no more work than the answer needs: it stops at the limit-th
// alike user (or message), where judge counts them all. A policy whose
// limit is large counts them all.
func (t *simStore) over(k *simKey, f fingerprint, has bool, now int64) bool {
	switch {
	case k == nil:
		return false
	case !k.extra.penalty(allowed(0, t.limit), now).Allowed:
		return true
	case !has:
		return false
	case t.limit > maxQuickLimit:
		return !t.count(k, f, now).Allowed
	}
	t.need = int(t.limit)
	t.gather(k, f, max(now, k.newest))
	return t.enough
}

// maxQuickLimit is the largest limit over decides by gathering no more
// users than the limit (each one compared with those before).
const maxQuickLimit = 64

// holds reports whether k's wave (the message that crossed) would still
// be denied at now: while it does, k stays marked. A denial's retry_after
// is a time before which it stays denied (more messages only add to it),
// so it is counted again only from then (k.held), or once a message is
// taken back (untake).
func (t *simStore) holds(k *simKey, now int64) bool {
	if now < k.held {
		return true
	}
	v := t.judge(k, k.wave, len(k.wave.h) > 0, now)
	if !v.Allowed {
		k.held = now + v.RetryAfter.Milliseconds()
	}
	return !v.Allowed
}

func (t *simStore) observe(m msg, mark bool) crossing {
	var sk sketch
	has := t.sketchOf(&m, &sk)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hit(&m, sk.fingerprint(), has, mark)
}

func (t *simStore) observeAll(ms []msg, sel []int32, mark bool, out *[]crossing) {
	var sk sketch
	for _, j := range sel {
		has := t.sketchOf(&ms[j], &sk)
		t.mu.Lock()
		c := t.hit(&ms[j], sk.fingerprint(), has, mark)
		t.mu.Unlock()
		if c.j >= 0 {
			c.j = int(j)
			*out = append(*out, c)
		}
	}
}

// hit records message m, of fingerprint f if has, and returns the
// crossing it makes (j 0) or none (j -1); the lock is held. A marked key
// whose wave no longer holds is unmarked first.
func (t *simStore) hit(m *msg, f fingerprint, has, mark bool) crossing {
	k := t.key(m)
	if t.ids && m.id != 0 && k.counted(m.id, m.at, t.w, true) {
		t.touch(k)
		return crossing{j: -1}
	}
	if k.since != chat.Never && !t.holds(k, m.at) {
		k.since, k.wave, k.held = chat.Never, fingerprint{}, 0
	}
	ok := !t.over(k, f, has, m.at)
	t.add(k, m, f, has)
	c := crossing{j: -1}
	switch {
	case ok:
	case mark && k.since == chat.Never:
		c = t.cross(k, m, f)
	case mark && t.rule.acting:
		v := t.judge(k, f, has, m.at)
		c = crossing{count: v.Count, limit: v.Limit, denied: m.at + v.RetryAfter.Milliseconds(), again: true}
	}
	if t.ids && m.id != 0 {
		k.remember(m.id, simID{at: m.at})
	}
	t.touch(k)
	return c
}

// add moves k's window on to m's instant and puts m in it if it has a
// fingerprint and is not older than the window. The window moves first:
// the group place that expiry frees is then in cache when record reuses
// it (most messages' texts are new), where the other way round the
// reused place is the one the previous message freed, long out of cache
// on a process of many rooms.
func (t *simStore) add(k *simKey, m *msg, f fingerprint, has bool) {
	now := max(m.at, k.newest)
	k.newest = now
	t.expire(k, now)
	if has && m.at > now-t.w {
		t.record(k, f, m.userHash, m.at)
	}
}

// cross marks k as crossed by m, of fingerprint f, starts its penalty if
// the policy has one, and returns the crossing.
func (t *simStore) cross(k *simKey, m *msg, f fingerprint) crossing {
	k.since, k.wave, k.held = m.at, fingerprint{h: slices.Clone(f.h), cut: f.cut}, 0
	c := crossing{}
	if len(t.rule.steps) > 0 {
		c.until = k.extraOf().strike(m.at, &t.rule)
	}
	v := t.judge(k, k.wave, len(f.h) > 0, m.at)
	c.count, c.limit, c.denied = v.Count, v.Limit, m.at+v.RetryAfter.Milliseconds()
	return c
}

func (k *simKey) extraOf() *keyExtra {
	if k.extra == nil {
		k.extra = &keyExtra{}
	}
	return k.extra
}

// counted reports whether k counted a hit with id within the window
// before now: consumed only, or any.
func (k *simKey) counted(id uint64, now, w int64, consumedOnly bool) bool {
	h, ok := k.ids[id]
	return ok && h.at > now-w && (h.consumed || !consumedOnly)
}

func (k *simKey) remember(id uint64, h simID) {
	if k.ids == nil {
		k.ids = map[uint64]simID{}
	}
	k.ids[id] = h
}

func (t *simStore) check(m msg) Verdict {
	var sk sketch
	has := t.sketchOf(&m, &sk)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.judge(t.keys[t.nameOf(&m)], sk.fingerprint(), has, m.at)
}

func (t *simStore) active(now int64, fn func(room, user string, v Verdict, since, until int64)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := t.head; k != nil; k = k.next {
		if k.since == chat.Never {
			continue
		}
		if v := t.judge(k, k.wave, len(k.wave.h) > 0, now); !v.Allowed {
			var until int64
			if k.extra != nil && k.extra.until > now {
				until = k.extra.until
			}
			room, user := splitKey(k.name, t.scope)
			fn(room, user, v, k.since, until)
		}
	}
}

func (t *simStore) sweep(now int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	gone := 0
	for k := t.tail; k != nil; {
		prev := k.prev
		if t.atRest(k, now) {
			t.remove(k)
			gone++
		}
		k = prev
	}
	t.expired += uint64(gone)
	return gone
}

func (t *simStore) stats() (keys int, evicted, expired uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.keys), t.evicted, t.expired
}

func (t *simStore) addCounts(evicted, expired uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evicted += evicted
	t.expired += expired
}

func (t *simStore) setRule(r extraRule) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rule = r
}

func (t *simStore) remembersIDs() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ids
}

// The consuming checks (consume.go).

func (t *simStore) lock()   { t.mu.Lock() }
func (t *simStore) unlock() { t.mu.Unlock() }

func (t *simStore) counted(m msg) bool {
	k := t.keys[t.nameOf(&m)]
	return k != nil && k.counted(m.id, m.at, t.w, false)
}

func (t *simStore) verdict(m msg) Verdict {
	var sk sketch
	has := t.sketchOf(&m, &sk)
	return t.judge(t.keys[t.nameOf(&m)], sk.fingerprint(), has, m.at)
}

func (t *simStore) refuse(m msg, mark bool) crossing {
	k := t.key(&m)
	t.touch(k)
	if !mark || k.since != chat.Never {
		return crossing{j: -1}
	}
	var sk sketch
	t.sketchOf(&m, &sk)
	return t.cross(k, &m, sk.fingerprint())
}

// take records an allowed consuming check. It leaves the alert mark as it
// is: an allowed message ends no wave.
func (t *simStore) take(m msg) {
	t.ids = true
	var sk sketch
	has := t.sketchOf(&m, &sk)
	k := t.key(&m)
	k.remember(m.id, simID{at: m.at, consumed: true})
	t.add(k, &m, sk.fingerprint(), has)
	t.touch(k)
}

// untake takes back the message a consuming check recorded: the newest
// of its user with its fingerprint at its instant.
func (t *simStore) untake(m msg) bool {
	var sk sketch
	has := t.sketchOf(&m, &sk)
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[t.nameOf(&m)]
	if k == nil {
		return false
	}
	h, ok := k.ids[m.id]
	if !ok || !h.consumed {
		return false
	}
	delete(k.ids, m.id)
	k.held = 0 // the wave may hold no longer
	if has {
		t.unrecord(k, sk.fingerprint(), m.userHash, h.at)
	}
	return true
}

// unrecord takes the newest message of user with fingerprint f at `at`
// out of k's window, if it is there. A group's members are in the order
// of its recs, so the member's rank among them is its rec's among the
// group's.
func (t *simStore) unrecord(k *simKey, f fingerprint, user uint64, at int64) {
	gi := int32(slices.IndexFunc(k.groups, func(g simGroup) bool {
		return g.count > 0 && g.cut == f.cut && slices.Equal(k.fp(&g).h, f.h)
	}))
	if gi < 0 {
		return
	}
	g := &k.groups[gi]
	members := g.members()
	j := len(members) - 1
	for j >= 0 && (members[j].at != at || members[j].user != user) {
		j--
	}
	if j < 0 {
		return
	}
	rank := 0
	for i := k.head; i < len(k.recs); i++ {
		if k.recs[i].g != gi {
			continue
		}
		if rank == j {
			k.recs = slices.Delete(k.recs, i, i+1)
			break
		}
		rank++
	}
	if g.drop(j); g.count == 0 {
		t.dropGroup(k, gi)
	}
}
