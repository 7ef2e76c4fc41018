package group

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/throttle"
)

// checks are the questions of a throttle check, one per stage whose
// policies decide it, in the order room, user, group: each policy is
// decided by the owner of the key's partition (a room's for room and
// user_in_room scopes, a user's for user scope, partition 0's for group
// scope).
func (m *Member) checks(base question, r *rules) []question {
	var asks []question
	// The room stage also decides the moderators' actions.
	if len(r.byScope[throttle.ScopeRoom]) > 0 || m.cfg.Book != nil && !m.cfg.Book.Empty() {
		q := base
		q.Stage, q.Parts = stageRoom, []int{Partition(chat.Token(base.Room), m.cfg.Partitions)}
		asks = append(asks, q)
	}
	if len(r.byScope[throttle.ScopeUser]) > 0 {
		q := base
		q.Stage, q.Parts = stageUser, []int{Partition(chat.Token(base.User), m.cfg.Partitions)}
		asks = append(asks, q)
	}
	if len(r.byScope[throttle.ScopeGroup]) > 0 {
		q := base
		q.Stage, q.Parts = stageAll, []int{0}
		asks = append(asks, q)
	}
	return asks
}

// joinChecks is the question of a join's consuming check: to the room
// stage, if some policy locks the room; none for another kind.
func (m *Member) joinChecks(tq throttle.Query, id string, now int64, r *rules) []question {
	if tq.Kind != chat.KindJoin || !slices.ContainsFunc(r.byScope[throttle.ScopeRoom], func(p throttle.Policy) bool { return p.Acts(throttle.ActLock) }) {
		return nil
	}
	return []question{{Op: opJoin, Room: tq.Room, User: tq.User, ID: id, Now: now,
		Stage: stageRoom, Parts: []int{Partition(chat.Token(tq.Room), m.cfg.Partitions)}}}
}

// Settle returns once every live member of the group holds the
// moderators' actions up to revision rev (each waits a second at most for
// its watch), so that an action set through this member holds for the
// very next check on any member.
func (m *Member) Settle(ctx context.Context, rev uint64) error {
	var wg sync.WaitGroup
	for name := range m.leases.Table().Members {
		wg.Go(func() { m.request(name, question{Op: opBook, Book: rev}) })
	}
	wg.Wait()
	return ctx.Err()
}

// bookRev is the revision of the moderators' actions this member holds.
func (m *Member) bookRev() uint64 {
	if m.cfg.Book == nil {
		return 0
	}
	return m.cfg.Book.Rev()
}

// Check is a throttle check: each stage's policies are asked of its owner
// at once, and the decisions put back in the policies' order.
func (m *Member) Check(now int64, tq throttle.Query) throttle.Result {
	now = m.clamp(now)
	res := throttle.Result{Allowed: true, AsOf: chat.Time(now), Room: tq.Room, User: tq.User, Decisions: []throttle.Decision{}}
	r := m.rules.Load()
	asks := m.checks(question{Op: opCheck, Room: tq.Room, User: tq.User, Text: tq.Text, HasText: tq.HasText, Mentions: tq.Mentions, Roles: tq.Roles, Book: m.bookRev(), Now: now}, r)
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		missing int
	)
	for _, q := range asks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers, miss := m.ask(q)
			mu.Lock()
			defer mu.Unlock()
			missing += miss
			for _, a := range answers {
				res.Decisions = append(res.Decisions, a.Decisions...)
			}
		}()
	}
	wg.Wait()
	m.finish(&res, r, missing)
	return res
}

// finish puts a check's decisions in the policies' order, counts them,
// and decides the answer: denied if an enforcing policy denies, or if a
// stage had no owner to ask and --throttle-unowned is deny.
func (m *Member) finish(res *throttle.Result, r *rules, missing int) {
	slices.SortFunc(res.Decisions, func(a, b throttle.Decision) int { return cmp.Compare(r.order[a.Policy], r.order[b.Policy]) })
	for _, d := range res.Decisions {
		m.metrics.decided(d)
		if !d.Allowed && d.Mode == throttle.ModeEnforce {
			res.Allowed = false
		}
	}
	if missing > 0 && m.cfg.Unowned == UnownedDeny {
		res.Allowed = false
	}
	res.Coverage = coverage(missing)
}

// Consume is a consuming check (docs/contract.md section 10), decided by
// the owners of its stages one after the other, in the order room, user,
// group: each decides and, if its policies allow, records at once. The
// first stage that denies ends it: the stages before it take back what
// they recorded (Unconsume), and those after it are asked read-only, for
// their decisions. So of n consuming checks of one key sent at once to any
// members, exactly as many are allowed as the policies allow: every stage
// sees them in some order, and only those the first allowed reach the
// next. A stage with no caught-up owner is missing: the check then follows
// --throttle-unowned, and records nothing there. The alert of a crossing
// is published by the owner that decides it.
//
// A join (tq.Kind chat.KindJoin) is decided by the join waves that lock
// its room, which are the room stage's: only its owner is asked, with an
// op of its own (opJoin), not opConsume with a kind: a member that does
// not know joins (a rolling upgrade) answers Unknown, where it would
// decide a message.
func (m *Member) Consume(now int64, tq throttle.Query, id string) throttle.Result {
	now = m.clamp(now)
	res := throttle.Result{Allowed: true, AsOf: chat.Time(now), Room: tq.Room, User: tq.User, Decisions: []throttle.Decision{}}
	r := m.rules.Load()
	asks := m.joinChecks(tq, id, now, r)
	if tq.Kind == chat.KindMessage {
		asks = m.checks(question{Op: opConsume, Room: tq.Room, User: tq.User, Text: tq.Text, HasText: tq.HasText, Mentions: tq.Mentions, Roles: tq.Roles, ID: id, Book: m.bookRev(), Now: now}, r)
	}
	var taken []question
	counted := len(asks) == 0 // some stage counts the message (vacuously, when none decides)
	missing := 0
	for i, q := range asks {
		answers, miss := m.ask(q)
		missing += miss
		denied := miss > 0 && m.cfg.Unowned == UnownedDeny
		for _, a := range answers {
			res.Decisions = append(res.Decisions, a.Decisions...)
			denied = denied || !a.Allowed
			if a.Recorded {
				taken = append(taken, q)
			}
			counted = counted || a.Consumed
		}
		if !denied {
			continue
		}
		res.Allowed = false
		for _, q := range taken {
			m.unconsume(q)
		}
		taken = nil
		for _, q := range asks[i+1:] {
			q.Op = opCheck
			answers, miss := m.ask(q)
			missing += miss
			for _, a := range answers {
				res.Decisions = append(res.Decisions, a.Decisions...)
			}
		}
		break
	}
	m.finish(&res, r, missing)
	consumed := res.Allowed && counted
	res.Consumed = &consumed
	return res
}

// unconsume takes back what a stage of a consuming check recorded (q, as
// asked to consume). It is confirmed once the stage's owner answers for
// its partition, whether it took the hit back or found nothing to take
// (an earlier try whose answer was lost took it; the partition changed
// hands, and the hit went with its old holder). An undo not confirmed is
// tried again off the check's path, twice, then logged and counted: the
// hit stays counted until it leaves its policies' windows
// (docs/contract.md section 10), as Set.Unconsume says of what it cannot
// take back.
func (m *Member) unconsume(q question) {
	q.Op = opUnconsume
	if m.undo(q) {
		return
	}
	m.undos.Go(func() {
		for _, d := range unconsumeRetries {
			select {
			case <-m.closing:
			case <-time.After(d):
				if m.undo(q) {
					return
				}
				continue
			}
			break
		}
		m.log.Warn("group: a consuming check's hit was not taken back: it stays counted until it leaves its policies' windows",
			"stage", q.Stage, "room", q.Room, "user", q.User, "id", q.ID)
		m.unconsumeFailed.Inc()
	})
}

// unconsumeRetries are the waits before each try again of an undo not
// confirmed.
var unconsumeRetries = []time.Duration{250 * time.Millisecond, time.Second}

// undo asks the owner of q's partition to take back a consuming check's
// hit, and reports whether it confirmed.
func (m *Member) undo(q question) bool {
	answers, missing := m.ask(q)
	return missing == 0 && len(answers) > 0
}
