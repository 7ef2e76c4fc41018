package throttle

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// refKey is one key of one policy in the reference: every hit (in its
// oracle), and the hits that carried an id, as the contract says they are
// remembered.
type refKey struct {
	o   oracle
	ids []refID
}

type refID struct {
	id       string
	at       int64
	consumed bool
}

// consumeRef is the reference of a Set's consuming checks: a plain list of
// hits per key, and ids kept by the rules of docs/contract.md section 10,
// written the plain way.
type consumeRef struct {
	ps        []Policy
	keys      map[string]*refKey
	hk        *hashKey
	consuming bool // a consuming check has come: every id is remembered
	// carried are the counts of each text that a random message has
	// (costs.go's vocabulary): nil, every message costs 1.
	carried map[string]refCarried
}

// cost is what a message with text that mentions mentions costs policy
// p: its weights times the counts the reference knows of the text.
func (c *consumeRef) cost(p Policy, text string, mentions []string) int64 {
	if c.carried == nil {
		return 1
	}
	return refCost(p.Cost, c.carried[text], mentions)
}

func (c *consumeRef) key(p Policy, room, user, text string) *refKey {
	r, u := keyOf(p.Scope, room, user)
	k := p.Name + "\x00" + r + "\x00" + u
	if p.Algorithm == AlgRepeat {
		h, _ := c.hk.textHash(text)
		k += fmt.Sprint("\x00", h)
	}
	if c.keys[k] == nil {
		c.keys[k] = &refKey{o: oracleOf(p)}
	}
	return c.keys[k]
}

// sel is the policies that see a message in room, with text.
func (c *consumeRef) sel(room, text string) []Policy {
	var out []Policy
	for _, p := range c.ps {
		_, hasText := c.hk.textHash(text)
		if (len(p.Rooms) == 0 || room == "r1" || strings.HasPrefix(room, "r") && strings.HasSuffix(room, "2")) && (p.Algorithm != AlgRepeat || hasText) {
			out = append(out, p)
		}
	}
	return out
}

func (k *refKey) counted(p Policy, id string, now int64, consumedOnly bool) bool {
	for _, h := range k.ids {
		if h.id == id && h.at > now-p.Window.Milliseconds() && (h.consumed || !consumedOnly) {
			return true
		}
	}
	return false
}

func (k *refKey) remember(p Policy, h refID) {
	var kept []refID
	for _, o := range k.ids {
		if o.at > h.at-p.Window.Milliseconds() {
			kept = append(kept, o)
		}
	}
	if most := max(p.Limit, p.Burst) + p.Limit; len(kept) >= most {
		kept = kept[len(kept)-most+1:]
	}
	k.ids = append(kept, h)
}

func (c *consumeRef) event(room, user, text string, mentions []string, id string, at int64) {
	for _, p := range c.sel(room, text) {
		k, cost := c.key(p, room, user, text), c.cost(p, text, mentions)
		if cost == 0 {
			continue // not a hit: nothing counted, no id remembered
		}
		if c.consuming && id != "" && k.counted(p, id, at, true) {
			continue // counted by its consuming check
		}
		k.o.hit(at, cost)
		if c.consuming && id != "" {
			k.remember(p, refID{id: id, at: at})
		}
	}
}

// consume returns what the reference answers: each policy's allowed,
// count and remaining, whether the check was consumed, and whether it was
// counted before.
func (c *consumeRef) consume(room, user, text string, mentions []string, id string, now int64) (ok []bool, counts, remaining []int64, consumed, again bool) {
	c.consuming = true
	ps := c.sel(room, text)
	for _, p := range ps {
		again = again || c.key(p, room, user, text).counted(p, id, now, false)
	}
	consumed = true
	for _, p := range ps {
		a, n, r := c.key(p, room, user, text).o.decide(now, c.cost(p, text, mentions))
		if again {
			a = true
		}
		ok, counts, remaining = append(ok, a), append(counts, n), append(remaining, r)
		if !a && p.Mode != ModeShadow {
			consumed = false
		}
	}
	if consumed && !again {
		for _, p := range ps {
			if cost := c.cost(p, text, mentions); cost > 0 { // one that costs nothing takes nothing
				k := c.key(p, room, user, text)
				k.o.hit(now, cost)
				k.remember(p, refID{id: id, at: now, consumed: true})
			}
		}
	}
	return ok, counts, remaining, consumed, again
}

// TestConsumeAgainstOracle runs a Set of every algorithm and scope and the
// reference side by side over random interleavings of events (with ids and
// without, the event of a consuming check arriving later, twice, never, or
// before its check), read-only checks and consuming checks (with fresh ids
// and with ids seen before), in and slightly out of order, and compares
// every decision of every check. It runs again with policies that weigh
// what messages carry (docs/contract.md section 15), random weights, and
// messages of random texts and mentions, whose counts the reference knows
// from how it wrote them.
func TestConsumeAgainstOracle(t *testing.T) {
	traces := 40
	if testing.Short() || raceEnabled {
		traces = 12
	}
	for _, costs := range []bool{false, true} {
		t.Run(fmt.Sprint("costs=", costs), func(t *testing.T) {
			for seed := range traces {
				consumeTrace(t, seed, costs)
				if t.Failed() {
					return
				}
			}
		})
	}
}

// consumeTrace is one trace of TestConsumeAgainstOracle.
func consumeTrace(t *testing.T, seed int, costs bool) {
	r := rand.New(rand.NewPCG(uint64(seed), 31))
	ps := allPolicies()
	for i := range ps {
		ps[i] = ps[i].withDefaults()
		if r.IntN(4) == 0 {
			ps[i].Mode = ModeShadow
		}
		if costs {
			ps[i].Cost = randomWeights(r)
		}
	}
	s := mustSet(t, ps)
	ref := &consumeRef{ps: ps, keys: map[string]*refKey{}, hk: s.state.Load().hk}
	if costs {
		ref.carried = map[string]refCarried{}
	}
	var pending []chat.Event // events of consuming checks, not yet arrived
	now, newest := int64(0), int64(0)
	nextID := 0
	for step := range 3000 {
		now += []int64{0, 0, 1, 7, 40, 300, 3000}[r.IntN(7)]
		newest = max(newest, now)
		room, user := fmt.Sprint("r", r.IntN(3)), fmt.Sprint("u", r.IntN(4))
		var text string
		var mentions []string
		if costs {
			text, mentions = randomMessage(r, ref.carried)
		} else {
			text = []string{"a", "A ", "b", ""}[r.IntN(4)]
		}
		what := fmt.Sprintf("seed %d step %d", seed, step)
		switch k := r.IntN(10); {
		case k < 3: // an event: plain, with an id, or the event of a consuming check
			ev := chat.Event{Room: room, User: user, Text: text, Mentions: mentions, TS: at(now)}
			if r.IntN(2) == 0 {
				nextID++
				ev.ID = fmt.Sprint("e", nextID)
			}
			if len(pending) > 0 && r.IntN(2) == 0 {
				i := r.IntN(len(pending))
				ev = pending[i]
				ev.TS = max(ev.TS, at(now)-int64(r.IntN(50))) // late, a little
				if r.IntN(3) != 0 {                           // twice, sometimes
					pending = append(pending[:i], pending[i+1:]...)
				}
			}
			if r.IntN(2) == 0 {
				s.Observe(ev)
			} else {
				s.ObserveBatch([]chat.Event{ev}, nil, nil)
			}
			ref.event(ev.Room, ev.User, ev.Text, ev.Mentions, ev.ID, ev.TS)
		case k < 5:
			res := s.Decide(at(now), Query{Room: room, User: user, Text: text, HasText: true, Mentions: mentions})
			var ps []Policy = ref.sel(room, text)
			for i, p := range ps {
				d, cost := res.Decisions[i], ref.cost(p, text, mentions)
				v := Verdict{Allowed: d.Allowed, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, RetryAfter: ms(d.RetryAfterMs)}
				compare(t, v, ref.key(p, room, user, text).o, at(now), cost, fmt.Sprintf("%s: check %s %s %q %q: %s", what, room, user, text, mentions, p.Name))
				if d.Policy != p.Name || t.Failed() {
					t.Fatalf("%s: check %s %s %q: %s says %+v", what, room, user, text, p.Name, d)
				}
			}
		default: // a consuming check: a fresh id, an id seen before, or one whose event came first
			nextID++
			id := fmt.Sprint("c", nextID)
			switch r.IntN(6) {
			case 0:
				id = fmt.Sprint("c", 1+r.IntN(nextID)) // maybe seen before
			case 1: // its event first
				id = fmt.Sprint("e", nextID)
				ev := chat.Event{Room: room, User: user, Text: text, Mentions: mentions, TS: at(now), ID: id}
				s.Observe(ev)
				ref.event(room, user, text, mentions, id, ev.TS)
			}
			res, _, _ := s.Consume(at(now), Query{Room: room, User: user, Text: text, HasText: true, Mentions: mentions}, id)
			ok, counts, rems, consumed, again := ref.consume(room, user, text, mentions, id, at(now))
			if len(res.Decisions) != len(ok) {
				t.Fatalf("%s: %d decisions, reference %d", what, len(res.Decisions), len(ok))
			}
			for i, d := range res.Decisions {
				if d.Allowed != ok[i] || d.Count != counts[i] || d.Remaining != rems[i] {
					t.Fatalf("%s: consume %s %s %q %s (again %v): %+v, reference allowed %v count %d remaining %d", what, room, user, text, id, again, d, ok[i], counts[i], rems[i])
				}
			}
			if res.Allowed != consumed || res.Consumed == nil || *res.Consumed != consumed {
				t.Fatalf("%s: consume %s: allowed %v consumed %v, reference %v", what, id, res.Allowed, res.Consumed, consumed)
			}
			if consumed && !again && r.IntN(4) != 0 { // its event will come (or, a quarter of the time, never)
				pending = append(pending, chat.Event{Room: room, User: user, Text: text, Mentions: mentions, TS: at(now), ID: id})
			}
		}
	}
}

// A burst of consuming checks of one key, sent at once from many
// goroutines, is allowed exactly as often as the policy allows, for every
// algorithm and scope; the events that then arrive with their ids do not
// count again; denied checks record nothing.
func TestConsumeBurstIsExact(t *testing.T) {
	for _, p := range allPolicies() {
		p = p.withDefaults()
		p.Rooms = nil
		t.Run(p.Name, func(t *testing.T) {
			s := mustSet(t, []Policy{p})
			const n = 400
			allowedWant := int64(p.Limit)
			if p.Algorithm == AlgTokenBucket || p.Algorithm == AlgGCRA {
				allowedWant = int64(p.Burst)
			}
			var allowed atomic.Int64
			var wg sync.WaitGroup
			ids := make(chan string, n)
			now := at(0)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range n / 8 {
						id := fmt.Sprint("m-", g, "-", i)
						if res, _, _ := s.Consume(now, Query{Room: "lobby", User: "bot", Text: "spam", HasText: true}, id); res.Allowed {
							allowed.Add(1)
							ids <- id
						}
					}
				}()
			}
			wg.Wait()
			close(ids)
			if got := allowed.Load(); got != allowedWant {
				t.Fatalf("%d of %d consuming checks allowed, want %d", got, n, allowedWant)
			}
			before := s.Check(now, "lobby", "bot", "spam", true).Decisions[0]
			for id := range ids { // the allowed messages' events arrive
				s.Observe(chat.Event{Room: "lobby", User: "bot", Text: "spam", TS: now, ID: id})
			}
			if after := s.Check(now, "lobby", "bot", "spam", true).Decisions[0]; after != before {
				t.Errorf("the consumed messages' events counted again: %+v, then %+v", before, after)
			}
		})
	}
}

// A million denied consuming checks with fresh ids leave the Set's memory
// where it was: a denied check records nothing.
func TestDeniedConsumesGrowNothing(t *testing.T) {
	s := mustSet(t, DefaultPolicies()[:2]) // the sliding windows
	now := at(0)
	for i := range 10 {
		s.Consume(now, Query{Room: "lobby", User: "bot", Text: "", HasText: false}, fmt.Sprint("ok-", i))
	}
	size := func() (ids, extras int) {
		for _, st := range s.state.Load().stores {
			tb := st.(*table[slidingState, uint32, slidingKernel])
			extras += len(tb.extra)
			for _, x := range tb.extra {
				ids += len(x.ids)
			}
		}
		return
	}
	ids0, extras0 := size()
	n := 1_000_000
	if testing.Short() || raceEnabled {
		n = 100_000
	}
	for i := range n {
		if res, _, _ := s.Consume(now, Query{Room: "lobby", User: "bot", Text: "", HasText: false}, fmt.Sprint("flood-", i)); res.Allowed {
			t.Fatalf("check %d allowed", i)
		}
	}
	if ids, extras := size(); ids != ids0 || extras != extras0 {
		t.Errorf("%d denied consuming checks: %d ids in %d keys' extras, before %d in %d", n, ids, extras, ids0, extras0)
	}
}

// The same id consumed twice is answered as the first was and records
// nothing; an event that came first with the id counts for its check.
func TestConsumeTwice(t *testing.T) {
	p := Policy{Name: "p", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 2, Window: 10 * time.Second}
	s := mustSet(t, []Policy{p})
	first, _, _ := s.Consume(at(0), Query{Room: "r", User: "u", Text: "", HasText: false}, "m1")
	again, _, _ := s.Consume(at(5), Query{Room: "r", User: "u", Text: "", HasText: false}, "m1")
	if !first.Allowed || !again.Allowed || *again.Consumed != true || again.Decisions[0].Count != 1 {
		t.Fatalf("first %+v, again %+v: want both allowed and consumed, the count 1", first, again)
	}
	s.Observe(chat.Event{Room: "r", User: "u", TS: at(6), ID: "m2"}) // an event before its check
	late, _, _ := s.Consume(at(7), Query{Room: "r", User: "u", Text: "", HasText: false}, "m2")
	if !late.Allowed || late.Decisions[0].Count != 2 {
		t.Fatalf("the check of an event that came first: %+v, want allowed, the count 2 (not 3)", late)
	}
	if res, _, _ := s.Consume(at(8), Query{Room: "r", User: "u", Text: "", HasText: false}, "m3"); res.Allowed || *res.Consumed {
		t.Fatalf("a third message: %+v, want denied", res)
	}
}

// Unconsume takes back exactly what a consuming check recorded: afterwards
// every answer is the one a Set that never saw it gives. With costs too:
// it takes back the message's whole cost.
func TestUnconsume(t *testing.T) {
	for _, costs := range []bool{false, true} {
		for _, p := range allPolicies() {
			p = p.withDefaults()
			p.Rooms = nil
			r := rand.New(rand.NewPCG(5, 5))
			if costs {
				p.Cost = Cost{Messages: 1, Mentions: 1, Emoji: 1}
			}
			t.Run(fmt.Sprint(p.Name, " cost ", p.Cost), func(t *testing.T) {
				unconsumeTrace(t, r, p, costs)
			})
		}
	}
}

func unconsumeTrace(t *testing.T, r *rand.Rand, p Policy, costs bool) {
	s, ref := mustSet(t, []Policy{p}), mustSet(t, []Policy{p})
	now := int64(0)
	window := p.Algorithm != AlgTokenBucket && p.Algorithm != AlgGCRA
	for step := range 2000 {
		now += []int64{0, 3, 50, 400}[r.IntN(4)]
		user := fmt.Sprint("u", r.IntN(3))
		q := Query{Room: "r", User: user, Text: "t", HasText: true}
		if costs {
			q.Text, q.Mentions = []string{"t", "t 😀", "t 😀😀"}[r.IntN(3)], []string{"a", "b", "c", "a"}[:r.IntN(5)]
		}
		if r.IntN(2) == 0 {
			ev := chat.Event{Room: "r", User: user, Text: q.Text, Mentions: q.Mentions, TS: at(now)}
			s.Observe(ev)
			ref.Observe(ev)
			continue
		}
		id := fmt.Sprint("x", step)
		res, _, _ := s.Consume(at(now), q, id)
		// The buckets give a token back as of their last update:
		// exact only before anything else comes.
		if res.Allowed && (window || r.IntN(2) == 0) {
			if !s.Unconsume(q, id) {
				t.Fatalf("step %d: nothing taken back", step)
			}
		} else if res.Allowed {
			ref.Consume(at(now), q, id)
		}
		for _, u := range []string{"u0", "u1", "u2"} {
			a, b := s.Check(at(now), "r", u, "t", true), ref.Check(at(now), "r", u, "t", true)
			if fmt.Sprint(a.Decisions) != fmt.Sprint(b.Decisions) {
				t.Fatalf("step %d, %s: %+v, without the taken-back checks %+v", step, u, a.Decisions, b.Decisions)
			}
		}
	}
}

// A key that crosses a policy with a penalty stays denied for it, even
// once its rate has fallen, and its alert, its decision and Active say
// until when; the Nth crossing within strikes_within gets the Nth step of
// escalate, and a crossing after a quiet strikes_within starts again from
// the first. A denied consuming check crosses as a message over the limit
// does.
func TestPenaltyAndEscalation(t *testing.T) {
	sec := int64(1000)
	p := Policy{Name: "p", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 2, Window: 10 * time.Second,
		Escalate: []time.Duration{time.Minute, 10 * time.Minute}, StrikesWithin: time.Hour}
	s := mustSet(t, []Policy{p})
	// cross sends three messages from t0 on and returns the alert of the
	// third, the crossing.
	cross := func(t0 int64) Alert {
		t.Helper()
		var alerts []Alert
		for i := range int64(3) {
			alerts = append(alerts, s.Observe(chat.Event{Room: "r", User: "u", TS: at(t0 + i)})...)
		}
		if len(alerts) != 1 || alerts[0].Until == nil {
			t.Fatalf("crossing at %d: alerts %+v, want one with its penalty's end", t0, alerts)
		}
		return alerts[0]
	}
	a := cross(0)
	if want := ct(2 + 60*sec); *a.Until != want {
		t.Fatalf("first crossing: until %v, want %v (the first step, 1m)", *a.Until, want)
	}
	// 30 s on, the window is empty, and the penalty still holds.
	d := s.Check(at(30*sec), "r", "u", "", false).Decisions[0]
	if d.Allowed || d.Count != 0 || d.RetryAfterMs != 2+60*sec-30*sec {
		t.Fatalf("during the penalty: %+v, want denied with 0 messages, retry at the penalty's end", d)
	}
	if act := s.Active(at(30 * sec)); len(act) != 1 || act[0].Until == nil || *act[0].Until != *a.Until {
		t.Fatalf("active during the penalty: %+v", act)
	}
	if d := s.Check(at(2+60*sec), "r", "u", "", false).Decisions[0]; !d.Allowed {
		t.Fatalf("at the penalty's end: %+v, want allowed", d)
	}
	if act := s.Active(at(2 + 60*sec)); len(act) != 0 {
		t.Fatalf("active after the penalty: %+v", act)
	}
	// The second crossing within the hour gets 10m; the third the last step again.
	if a := cross(2 * 60 * sec); *a.Until != ct(2*60*sec+2+10*60*sec) {
		t.Fatalf("second crossing: until %v", *a.Until)
	}
	if a := cross(20 * 60 * sec); *a.Until != ct(20*60*sec+2+10*60*sec) {
		t.Fatalf("third crossing: until %v, want the last step", *a.Until)
	}
	// Two quiet hours later: the first step again.
	if a := cross(3 * 3600 * sec); *a.Until != ct(3*3600*sec+2+60*sec) {
		t.Fatalf("after strikes_within: until %v, want the first step", *a.Until)
	}
	// A denied consuming check crosses too.
	q := Policy{Name: "q", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 1, Window: time.Second, Penalty: 5 * time.Minute}
	c := mustSet(t, []Policy{q})
	c.Consume(at(0), Query{Room: "r", User: "u", Text: "", HasText: false}, "1")
	res, _, alerts := c.Consume(at(1), Query{Room: "r", User: "u", Text: "", HasText: false}, "2")
	if res.Allowed || len(alerts) != 1 || *alerts[0].Until != ct(1+300*sec) || res.Decisions[0].RetryAfterMs != 300*sec {
		t.Fatalf("a denied consuming check: %+v, alerts %+v; want its crossing, with the 5m penalty", res, alerts)
	}
	if res, _, alerts := c.Consume(at(10*sec), Query{Room: "r", User: "u", Text: "", HasText: false}, "3"); res.Allowed || len(alerts) != 0 {
		t.Fatalf("during the penalty, the rate fallen: %+v, alerts %+v; want denied, no second alert", res, alerts)
	}
}

// A Set saved with consumed ids and a penalty in force loads them back:
// the event of a check consumed before the save is not counted again
// after the load, the penalty still denies, and a reconfigure that keeps
// the policy keeps them too.
func TestExtrasSurviveStateAndReconfigure(t *testing.T) {
	p := Policy{Name: "p", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 3, Window: 10 * time.Second, Penalty: time.Minute}
	s := mustSet(t, []Policy{p})
	for i := range 3 {
		s.Consume(at(int64(i)), Query{Room: "r", User: "u"}, fmt.Sprint("m", i))
	}
	s.Consume(at(10), Query{Room: "r", User: "u"}, "over") // the crossing: a minute's penalty
	saved := s.AppendState(nil)
	if saved[0] != 2 {
		t.Fatalf("a state with extras in format %d, want 2", saved[0])
	}
	for name, load := range map[string]func() *Set{
		"loaded": func() *Set {
			l := mustSet(t, []Policy{p})
			if err := l.LoadState(saved); err != nil {
				t.Fatal(err)
			}
			if again := l.AppendState(nil); !bytes.Equal(again, saved) {
				t.Fatalf("saves other bytes than it loaded")
			}
			return l
		},
		"reconfigured": func() *Set {
			q := p
			q.Limit = 4 // kept: same scope, algorithm and window
			if err := s.Reconfigure([]Policy{q}); err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		l := load()
		for i := range 3 {
			l.Observe(chat.Event{Room: "r", User: "u", TS: at(int64(20 + i)), ID: fmt.Sprint("m", i)})
		}
		d := l.Check(at(30), "r", "u", "", false).Decisions[0]
		if d.Count != 3 || d.Allowed || d.RetryAfterMs != 10+60_000-30 {
			t.Errorf("%s: %+v, want the 3 consumed messages counted once, denied by the penalty", name, d)
		}
	}
}
