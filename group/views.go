package group

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/group/lease"
	"github.com/chatpulse/chatpulse/throttle"
)

// askTimeout is how long a member waits for another's answer before it
// counts that member's partitions as missing.
const askTimeout = 2 * time.Second

// ask puts q to the owners of its partitions, each about the partitions
// it owns (itself without a round trip), and returns the answers of those
// that answered for some, and how many partitions none answered for:
// those without a caught-up owner, and those whose owner did not answer,
// or answered that it does not hold them (any more).
func (m *Member) ask(q question) ([]answer, int) {
	t := m.leases.Table()
	byOwner := map[string][]int{}
	for _, p := range q.Parts {
		if o, ok := t.Owners[p]; ok && o.Ready {
			byOwner[o.Instance] = append(byOwner[o.Instance], p)
		}
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		answers []answer
	)
	for owner, parts := range byOwner {
		q := q
		q.Parts = parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a := m.request(owner, q); len(a.Parts) > 0 { // else it did not answer for them: missing
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	missing := len(q.Parts)
	for _, a := range answers {
		missing -= len(a.Parts)
	}
	return answers, missing
}

// request puts q to one member.
func (m *Member) request(owner string, q question) answer {
	q.V = protocol
	if owner == m.cfg.Instance {
		return m.answer(q)
	}
	data, _ := json.Marshal(q)
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	reply, err := m.bus.Ask(ctx, bus.GroupQuery(m.cfg.Group, chat.Token(owner)), data)
	if err != nil {
		m.log.Debug("group: no answer", "member", owner, "err", err)
		return answer{}
	}
	var a answer
	switch err := json.Unmarshal(reply, &a); {
	case err == nil && a.Unknown:
		m.log.Warn("group: a member cannot answer this question (another version?); its partitions count as missing", "member", owner, "op", q.Op, "answer", a.Error)
		return answer{}
	case err != nil || a.Error != "":
		m.log.Warn("group: bad answer", "member", owner, "err", err, "error", a.Error)
		return answer{}
	}
	return a
}

// everything is the list of all partitions.
func (m *Member) everything() []int {
	ps := make([]int, m.cfg.Partitions)
	for p := range ps {
		ps[p] = p
	}
	return ps
}

func coverage(missing int) *chat.Coverage {
	return &chat.Coverage{Complete: missing == 0, MissingPartitions: missing}
}

// askAll asks q of every partition, at one as_of: if the owners read at
// different ones (one's clock was ahead of the others'), those behind are
// asked again at the latest, but never later than --max-skew past the
// group's clock: the partitions of a member further ahead are missing.
func (m *Member) askAll(q question) ([]answer, int) {
	q.Parts = m.everything()
	answers, missing := m.ask(q)
	limit := m.asOfLimit(q.Now)
	t, answers, again, over := alignAsOf(answers, q.Now, limit)
	missing += over
	if len(again) == 0 {
		return answers, missing
	}
	q.Now = t
	answers, missing = m.ask(q)
	_, answers, _, over = alignAsOf(answers, t, limit)
	return answers, missing + over
}

// clamp is the time this member asks the group at, for now on its clock:
// never past the group's clock plus --max-skew, so that a member whose
// clock runs fast moves no other member's partitions into its future by
// asking.
func (m *Member) clamp(now int64) int64 {
	if lead, ok := m.lead(); ok && lead < 0 {
		return now + lead
	}
	return now
}

// asOfLimit is the latest as_of of a view asked at now, clamped.
func (m *Member) asOfLimit(now int64) int64 {
	lead, ok := m.lead()
	if !ok {
		return math.MaxInt64
	}
	return now + max(lead, 0)
}

// lead is how far past this member's clock the group's views may be
// read: to the group's clock (the median of the members', as their member
// keys say) plus --max-skew. None without --max-skew, or before this
// member's clock is known.
func (m *Member) lead() (int64, bool) {
	t := m.leases.Table()
	self, ok := t.Members[m.cfg.Instance]
	if m.cfg.MaxSkew <= 0 || !ok || self.Clock == 0 {
		return 0, false
	}
	median, _ := lease.Skews(t.Members, m.cfg.MaxSkew)
	return median - self.Offset + m.cfg.MaxSkew.Milliseconds(), true
}

// gather is what a view's answers carry (pick says where), after first,
// the view of nothing that checked the window.
func gather[T any](first T, answers []answer, pick func(*answer) *T) []T {
	out := []T{first}
	for i := range answers {
		if v := pick(&answers[i]); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

// WindowNames and Windows answer from the configuration, which every
// member shares.
func (m *Member) WindowNames() []string       { return m.windows.WindowNames() }
func (m *Member) Windows() aggregator.Windows { return m.windows.Windows() }

// Overview is the group's overview.
func (m *Member) Overview(win string, k int, now int64) (aggregator.Overview, error) {
	now = m.clamp(now)
	empty, err := m.windows.Overview(win, k, now) // checks the window; zeros
	if err != nil {
		return empty, err
	}
	answers, missing := m.askAll(question{Op: opOverview, Window: empty.Window, K: k, Now: now})
	parts := gather(empty, answers, func(a *answer) *aggregator.Overview { return a.Overview })
	v := mergeOverview(parts, parts, k, m.seconds(empty.Window))
	v.Coverage = coverage(missing)
	return v, nil
}

// Rooms is the group's rooms list.
func (m *Member) Rooms(win string, limit int, now int64) (aggregator.Rooms, error) {
	now = m.clamp(now)
	empty, err := m.windows.Rooms(win, limit, now)
	if err != nil {
		return empty, err
	}
	answers, missing := m.askAll(question{Op: opRooms, Window: empty.Window, Limit: limit, Now: now})
	parts := gather(empty, answers, func(a *answer) *aggregator.Rooms { return a.Rooms })
	v := mergeRooms(parts, limit)
	v.Coverage = coverage(missing)
	return v, nil
}

// Room is one room's view, from the owner of its partition.
func (m *Member) Room(name, win string, k int, now int64) (aggregator.Room, error) {
	now = m.clamp(now)
	v, err := m.windows.Room(name, win, k, now) // zeros, if nobody answers
	if err != nil {
		return v, err
	}
	p := Partition(chat.Token(name), m.cfg.Partitions)
	answers, missing := m.ask(question{Op: opRoom, Room: name, Window: v.Window, K: k, Now: now, Parts: []int{p}})
	parts := gather(v, answers, func(a *answer) *aggregator.Room { return a.Room })
	v = parts[len(parts)-1] // its owner's, or zeros
	v.Coverage = coverage(missing)
	return v, nil
}

// User is one user's view, from the owner of its partition.
func (m *Member) User(name, win string, now int64) (aggregator.User, error) {
	now = m.clamp(now)
	v, err := m.windows.User(name, win, now)
	if err != nil {
		return v, err
	}
	p := Partition(chat.Token(name), m.cfg.Partitions)
	answers, missing := m.ask(question{Op: opUser, User: name, Window: v.Window, Now: now, Parts: []int{p}})
	parts := gather(v, answers, func(a *answer) *aggregator.User { return a.User })
	v = parts[len(parts)-1] // its owner's, or zeros
	v.Coverage = coverage(missing)
	return v, nil
}

// Active lists the keys over an enforcing policy in the whole group.
func (m *Member) Active(now int64) []throttle.Active {
	as, _ := m.ActiveCovered(now)
	return as
}

// ActiveCovered is Active and how much of the group it covers.
func (m *Member) ActiveCovered(now int64) ([]throttle.Active, *chat.Coverage) {
	now = m.clamp(now)
	answers, missing := m.ask(question{Op: opActive, Now: now, Parts: m.everything()})
	out := []throttle.Active{}
	for _, a := range answers {
		out = append(out, a.Active...)
	}
	m.sortActive(out)
	return append(throttle.ActionsActive(m.cfg.Book, now), out...), coverage(missing)
}
