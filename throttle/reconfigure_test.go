package throttle

import (
	"bytes"
	"cmp"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// oracleOf is the brute-force reference of one key of p, defaults filled.
func oracleOf(p Policy) oracle {
	l, w := int64(p.Limit), p.Window.Milliseconds()
	switch p.Algorithm {
	case AlgSlidingWindow:
		res := p.Resolution.Milliseconds()
		return &slidingOracle{limit: l, n: w / res, res: res}
	case AlgSlidingWindowCounter:
		return &counterOracle{limit: l, w: w}
	case AlgFixedWindow:
		return &fixedOracle{limit: l, w: w}
	case AlgTokenBucket:
		return &bucketOracle{limit: l, burst: int64(p.Burst), w: w}
	case AlgGCRA:
		return &gcraOracle{limit: l, burst: int64(p.Burst), w: w}
	}
	return &repeatOracle{limit: l, w: w}
}

// reconfigure changes o, the reference of a key, to the new limit and
// burst of p (defaults filled), as Reconfigure says a kept key does.
func reconfigure(o oracle, p Policy) {
	l, b := int64(p.Limit), int64(p.Burst)
	switch o := o.(type) {
	case *slidingOracle:
		o.limit = l
	case *counterOracle:
		o.limit = l
	case *fixedOracle:
		o.limit = l
	case *bucketOracle: // the tokens of its last hit, at most the new burst
		if o.started && o.tokens.Cmp(big.NewRat(b, 1)) > 0 {
			o.tokens = big.NewRat(b, 1)
		}
		o.limit, o.burst = l, b
	case *gcraOracle: // the same TAT, rounded up to a whole 1/limit ms
		if o.tat != nil {
			units := new(big.Rat).Mul(o.tat, big.NewRat(l, 1))
			down := new(big.Int).Div(new(big.Int).Neg(units.Num()), units.Denom()) // floor(-units)
			o.tat = new(big.Rat).SetFrac(down.Neg(down), big.NewInt(l))
		}
		o.limit, o.burst = l, b
	case *repeatOracle: // it kept only the newest occurrences that reach the limit, each counted up to it
		slices.SortStableFunc(o.hits, func(a, b hitAt) int { return cmp.Compare(a.at, b.at) })
		held := int64(0)
		for i := range o.hits {
			o.hits[i].cost = min(o.hits[i].cost, o.limit)
			held += o.hits[i].cost
		}
		for len(o.hits) > 1 && held-o.hits[0].cost >= o.limit {
			held -= o.hits[0].cost
			o.hits = o.hits[1:]
		}
		o.limit = l
	}
}

// TestReconfigureKeptKeyAgainstOracle runs a key of a policy of every
// algorithm through a random trace (that of TestAgainstOracle), and
// midway changes its limit and burst, which keeps its state: every answer,
// before and after, must be that of the brute-force reference, changed as
// Reconfigure's doc says. Again with a cost (one per mention), and
// messages that mention none to a few.
func TestReconfigureKeptKeyAgainstOracle(t *testing.T) {
	traces := 200
	if testing.Short() || raceEnabled {
		traces = 60
	}
	for _, costs := range []bool{false, true} {
		for _, alg := range messageAlgorithms() {
			t.Run(fmt.Sprint(alg.name, " costs ", costs), func(t *testing.T) {
				for seed := range traces {
					keptKeyTrace(t, alg, seed, costs)
					if t.Failed() {
						return
					}
				}
			})
		}
	}
}

func keptKeyTrace(t *testing.T, alg *algorithm, seed int, costs bool) {
	r := rand.New(rand.NewPCG(uint64(seed), 17))
	was := Policy{Name: "p", Scope: ScopeGroup, Algorithm: alg.name, Limit: 1 + r.IntN(6), Window: ms(windowMs(r))}
	if alg.resolution {
		res := []int64{1, 10, 250, 1000}[r.IntN(4)]
		was.Window, was.Resolution = ms((1+r.Int64N(12))*res), ms(res)
	}
	now := was
	now.Limit = 1 + r.IntN(6)
	if alg.burst {
		was.Burst, now.Burst = 1+r.IntN(6), 1+r.IntN(6)
	}
	if costs {
		was.Cost, now.Cost = Cost{Mentions: 1}, Cost{Mentions: 1}
	}
	name := fmt.Sprintf("seed %d (%+v, then limit %d burst %d)", seed, was, now.Limit, now.Burst)
	s, o := mustSet(t, []Policy{was}), oracleOf(was.withDefaults())
	tr := newTracer(r, false)
	for step := range 400 {
		if step == 200 {
			if err := s.Reconfigure([]Policy{now}); err != nil {
				t.Fatal(err)
			}
			reconfigure(o, now.withDefaults())
		}
		var mentions []string
		if costs {
			mentions = []string{"a", "b", "c", "d", "e", "f", "g", "h"}[:[]int{0, 1, 1, 2, 3, 8}[r.IntN(6)]]
		}
		cost := int64(1)
		if costs {
			cost = int64(len(mentions))
		}
		at, read := tr.next()
		d := decision(t, s.Decide(at, Query{Room: "r", User: "u", Text: "x", HasText: true, Mentions: mentions}), "p")
		v := Verdict{Allowed: d.Allowed, Count: d.Count, Limit: d.Limit, Remaining: d.Remaining, RetryAfter: ms(d.RetryAfterMs)}
		compare(t, v, o, at, cost, fmt.Sprintf("%s step %d: Check(%d) of cost %d", name, step, at, cost))
		if !read {
			s.Observe(chat.Event{TS: at, Room: "r", User: "u", Text: "x", Mentions: mentions})
			o.hit(at, cost)
		}
		if t.Failed() {
			return
		}
	}
}

// --- A Set reconfigured against Sets made with each policy's settings. ---

// reconfRooms are the room globs of the random policies; the rooms of
// stateTrace are r0 to r3, some with a long tail.
var reconfRooms = []string{"r0", "r1*", "r*2", "r?", "r3*", "r[", "*"}

// messageAlgorithms are the algorithms that decide messages (not
// join_wave, which counts joins: joinwave_test.go; nor spike, which
// decides none: spike_test.go; nor similar, whose decisions depend on
// the text: similar_test.go).
func messageAlgorithms() []*algorithm {
	var out []*algorithm
	for _, a := range algorithms {
		if !a.joins && !a.spike && a != &similarAlg {
			out = append(out, a)
		}
	}
	return out
}

// randomPolicy is a valid policy named name, defaults filled in.
func randomPolicy(r *rand.Rand, name string) Policy {
	for {
		p := Policy{
			Name:      name,
			Scope:     []Scope{ScopeUser, ScopeRoom, ScopeUserInRoom, ScopeGroup}[r.IntN(4)],
			Algorithm: messageAlgorithms()[r.IntN(len(messageAlgorithms()))].name,
			Window:    ms([]int64{500, 1000, 1500, 2000, 3000}[r.IntN(5)]),
			Mode:      ModeEnforce,
		}
		if r.IntN(4) == 0 {
			p.Mode = ModeShadow
		}
		randomLimit(r, &p)
		if p.Algorithm == AlgSlidingWindow {
			p.Resolution = ms([]int64{100, 250, 500}[r.IntN(3)])
		}
		if p.Algorithm == AlgTokenBucket || p.Algorithm == AlgGCRA {
			p.Burst = 1 + r.IntN(10)
		}
		randomRooms(r, &p)
		if r.IntN(3) == 0 {
			p.Cost = randomWeights(r)
		}
		if p.Validate() == nil {
			return p.withDefaults()
		}
	}
}

func randomLimit(r *rand.Rand, p *Policy) {
	p.Limit = 1 + r.IntN(8)
	if p.Algorithm == AlgRepeat {
		p.Limit = 1 + r.IntN(4)
	}
}

func randomRooms(r *rand.Rand, p *Policy) {
	p.Rooms = nil
	if r.IntN(5) < 2 {
		for range 1 + r.IntN(2) {
			if g := reconfRooms[r.IntN(len(reconfRooms))]; g != "r[" {
				p.Rooms = append(p.Rooms, g)
			}
		}
	}
}

// mutate makes a few random changes to ps: a limit, a burst, a mode or
// rooms changed (which keep a policy's state), an algorithm, a scope, a
// window or a resolution changed (which start it over), a policy renamed,
// removed or added, the order shuffled.
func mutate(r *rand.Rand, ps []Policy, fresh func() string) []Policy {
	ps = slices.Clone(ps)
	for range 1 + r.IntN(4) {
		if len(ps) == 0 {
			ps = append(ps, randomPolicy(r, fresh()))
			continue
		}
		i := r.IntN(len(ps))
		p := &ps[i]
		switch r.IntN(10) {
		case 0, 1:
			randomLimit(r, p)
		case 2:
			if p.Burst != 0 {
				p.Burst = 1 + r.IntN(10)
			}
		case 3:
			p.Mode = map[Mode]Mode{ModeEnforce: ModeShadow, ModeShadow: ModeEnforce}[p.Mode]
		case 4:
			randomRooms(r, p)
		case 5:
			*p = randomPolicy(r, p.Name)
		case 6:
			p.Name = fresh()
		case 7:
			ps = slices.Delete(ps, i, i+1)
		case 8:
			ps = slices.Insert(ps, r.IntN(len(ps)+1), randomPolicy(r, fresh()))
		default:
			r.Shuffle(len(ps), func(a, b int) { ps[a], ps[b] = ps[b], ps[a] })
		}
	}
	return ps
}

// A refPolicy follows one policy of the Set under test with a Set of that
// policy alone, whose settings it had from the start, with every room
// (ref is fed only the messages the policy saw).
type refPolicy struct {
	p   Policy
	pol *policy // p compiled, for its rooms
	ref *Set
	// ops is what the policy saw since it last started over: the indices
	// of the messages (into the trace's log), or ^now for a Sweep.
	ops []int64
	// exact: the Set must answer as ref does (false once a kept change
	// leaves state that no Set of the new settings could have); marks: its
	// alert marks are those of ref too, so alerts and Active must match.
	exact, marks bool
	// The counts of evicted and expired keys when it last started over.
	evicted, expired uint64
}

// rebuild makes r.ref a Set of r.p fed r.ops again.
func (r *refPolicy) rebuild(t *testing.T, log []chat.Event, maxKeys int) {
	p := r.p
	p.Rooms = nil
	r.ref = mustSet(t, []Policy{p}, WithMaxKeys(maxKeys))
	var evs []chat.Event
	for _, op := range r.ops {
		if op >= 0 {
			evs = append(evs, log[op])
			continue
		}
		r.ref.ObserveBatch(evs, nil, nil)
		evs = evs[:0]
		r.ref.Sweep(^op)
	}
	r.ref.ObserveBatch(evs, nil, nil)
}

// sees reports whether the policy records the message.
func (r *refPolicy) sees(hk *hashKey, room, text string) bool {
	_, hasText := hk.textHash(text)
	return r.pol.sees(room) && (!r.pol.text || hasText)
}

// TestReconfigureAgainstReferences runs a Set through a random trace,
// reconfiguring it now and then with random changes, and beside it one
// reference Set per policy, of that policy alone: for a policy kept, a Set
// that had its new settings from the start and saw the same messages, made
// again at each change; for one new or started over, a fresh one. The
// changes of settings that do not change what a policy's state holds
// (every one of sliding_window, sliding_window_counter and fixed_window, a
// lower limit of repeat, a mode, rooms) must leave the Set answering every
// Check exactly as the reference; and, unless the limit changed or the
// mode became enforce (which leave marks a reference would not have), with
// the same alerts and Active keys. Others (bursts and limits of the
// buckets, a higher limit of repeat) are checked against the brute-force
// references by TestReconfigureKeptKeyAgainstOracle; here they run only
// so that they mix with the rest. After each change the Set's state must
// save and load back whole.
func TestReconfigureAgainstReferences(t *testing.T) {
	steps := 1600
	if testing.Short() || raceEnabled {
		steps = 500
	}
	for _, maxKeys := range []int{30, 1000} {
		t.Run(fmt.Sprint("max", maxKeys), func(t *testing.T) {
			runReconfigure(t, maxKeys, steps)
		})
	}
}

func runReconfigure(t *testing.T, maxKeys, steps int) {
	opt := WithMaxKeys(maxKeys)
	tr := &stateTrace{r: rand.New(rand.NewPCG(uint64(maxKeys), 23))}
	r := tr.r
	names := 0
	fresh := func() string { names++; return fmt.Sprint("p", names) }
	var ps []Policy
	for range 6 {
		ps = append(ps, randomPolicy(r, fresh()))
	}
	s := mustSet(t, ps, opt)
	hk := s.state.Load().hk
	var log []chat.Event
	refs := map[string]*refPolicy{}
	var order []*refPolicy // as ps
	// apply makes the references of ps, the Set's new policies; before
	// are the Set's Stats before the change, by policy.
	apply := func(before map[string]PolicyStats) {
		rs, err := newRules(ps)
		if err != nil {
			t.Fatal(err)
		}
		next := map[string]*refPolicy{}
		order = order[:0]
		for i, p := range ps {
			old, ok := refs[p.Name]
			rp := &refPolicy{p: p, pol: rs.policies[i], exact: true, marks: true}
			switch {
			case !ok || !keeps(old.p, p):
				rp.evicted, rp.expired = before[p.Name].Evicted, before[p.Name].Expired // counted on by name
			default:
				*rp = *old
				rp.p, rp.pol = p, rs.policies[i]
				switch p.Algorithm {
				case AlgRepeat:
					rp.exact = rp.exact && p.Limit <= old.p.Limit
				case AlgTokenBucket, AlgGCRA:
					rp.exact = rp.exact && p.Limit == old.p.Limit && p.Burst == old.p.Burst
				}
				rp.marks = rp.marks && p.Limit == old.p.Limit && p.Burst == old.p.Burst && (p.Mode == ModeShadow || old.p.Mode == ModeEnforce)
			}
			rp.rebuild(t, log, maxKeys)
			next[p.Name] = rp
			order = append(order, rp)
		}
		refs = next
	}
	apply(nil)
	var checks, exactChecks, alerts, actives, reconfigs int
	for step := range steps {
		if step > 0 && r.IntN(60) == 0 {
			ps = mutate(r, ps, fresh)
			before := map[string]PolicyStats{}
			for _, st := range s.Stats() {
				before[st.Policy] = st
			}
			if err := s.Reconfigure(ps); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			reconfigs++
			if got := s.Policies(); !reflect.DeepEqual(got, ps) {
				t.Fatalf("step %d: Policies\n got %+v\nwant %+v", step, got, ps)
			}
			verifySet(t, s)
			reload(t, s, opt)
			apply(before)
		}
		switch r.IntN(8) {
		case 0:
			now := at(tr.now + r.Int64N(3000))
			s.Sweep(now)
			for _, rp := range order {
				rp.ref.Sweep(now)
				rp.ops = append(rp.ops, ^now)
			}
		case 1, 2, 3:
			evs := tr.events()
			got := map[string][]string{}
			s.ObserveBatch(evs, func(i int, a Alert) { got[a.Policy] = append(got[a.Policy], fmt.Sprint(i, a)) }, nil)
			for _, rp := range order {
				var seen []chat.Event
				var index []int
				for i, e := range evs {
					if rp.sees(hk, e.Room, e.Text) {
						seen, index = append(seen, e), append(index, i)
						rp.ops = append(rp.ops, int64(len(log)+i))
					}
				}
				var want []string
				rp.ref.ObserveBatch(seen, func(i int, a Alert) { want = append(want, fmt.Sprint(index[i], a)) }, nil)
				if rp.exact && rp.marks {
					if !reflect.DeepEqual(got[rp.p.Name], want) {
						t.Fatalf("step %d: alerts of %s\n got %v\nwant %v", step, rp.p.Name, got[rp.p.Name], want)
					}
					alerts += len(want)
				}
			}
			log = append(log, evs...)
		default:
			for range 5 {
				room, user, text := tr.names()
				now := at(tr.now + r.Int64N(4000) - 1000)
				res := s.Check(now, room, user, text, text != "")
				ds := res.Decisions
				for _, rp := range order {
					if !rp.sees(hk, room, text) {
						continue
					}
					if len(ds) == 0 || ds[0].Policy != rp.p.Name {
						t.Fatalf("step %d: no decision of %s in %+v", step, rp.p.Name, res)
					}
					want := rp.ref.Check(now, room, user, text, text != "").Decisions[0]
					if rp.exact {
						if ds[0] != want {
							t.Fatalf("step %d: %s %s %q at %d, %s\n got %+v\nwant %+v", step, room, user, text, now, rp.p.Name, ds[0], want)
						}
						exactChecks++
					}
					ds = ds[1:]
					checks++
				}
				if len(ds) > 0 {
					t.Fatalf("step %d: decisions %+v of no policy seeing room %s", step, ds, room)
				}
			}
			now := at(tr.now + r.Int64N(2000))
			byPolicy := map[string][]Active{}
			for _, a := range s.Active(now) {
				byPolicy[a.Policy] = append(byPolicy[a.Policy], a)
			}
			for _, rp := range order {
				if !rp.exact {
					continue
				}
				if rp.marks {
					var want []Active
					for _, a := range rp.ref.Active(now) {
						if a.Room == "" || rp.pol.sees(a.Room) {
							want = append(want, a)
						}
					}
					if !reflect.DeepEqual(byPolicy[rp.p.Name], want) {
						t.Fatalf("step %d: active of %s\n got %+v\nwant %+v", step, rp.p.Name, byPolicy[rp.p.Name], want)
					}
					actives += len(want)
				}
				got, want := s.Stats()[slices.Index(order, rp)], rp.ref.Stats()[0]
				if got.Keys != want.Keys || got.Evicted-rp.evicted != want.Evicted || got.Expired-rp.expired != want.Expired {
					t.Fatalf("step %d: stats of %s %+v (from %d evicted, %d expired), want %+v", step, rp.p.Name, got, rp.evicted, rp.expired, want)
				}
			}
		}
	}
	if reconfigs < 5 || exactChecks < 1000 || alerts == 0 || actives == 0 {
		t.Errorf("too little tested: %d reconfigurations, %d checks compared, %d alerts, %d active keys", reconfigs, exactChecks, alerts, actives)
	}
	t.Logf("%d reconfigurations, %d decisions, %d compared, %d alerts, %d active keys", reconfigs, checks, exactChecks, alerts, actives)
}

// The rules of Reconfigure's doc, one by one, on a user who floods.
func TestReconfigureKeepsMarksAndCounters(t *testing.T) {
	flood := Policy{Name: "flood", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 5, Window: 10 * time.Second}
	s := mustSet(t, []Policy{flood})
	observe := func(ms int64) []Alert { return s.Observe(chat.Event{TS: at(ms), Room: "lobby", User: "alice"}) }
	reconf := func(p Policy) {
		t.Helper()
		if err := s.Reconfigure([]Policy{p}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(ms int64) Decision { return decision(t, s.Check(at(ms), "lobby", "alice", "", false), "flood") }
	for i := range 4 {
		observe(int64(i))
	}
	// A lower limit: over it at once, alerting with the next message.
	flood.Limit = 3
	reconf(flood)
	if d := check(10); d.Allowed || d.Count != 4 || d.Limit != 3 {
		t.Fatalf("after limit 3: %+v", d)
	}
	if a := s.Active(at(10)); len(a) != 0 {
		t.Fatalf("active before its next message: %+v", a)
	}
	if a := observe(20); len(a) != 1 || a[0].Count != 5 || a[0].Limit != 3 || a[0].At != ct(20) {
		t.Fatalf("the next message alerts %+v", a)
	}
	// Marked: stays marked across a change, and does not alert again.
	flood.Limit, flood.Rooms = 2, []string{"lob*"}
	reconf(flood)
	if a := observe(30); a != nil {
		t.Fatalf("alerted again: %+v", a)
	}
	if a := s.Active(at(40)); len(a) != 1 || a[0].Since != ct(20) || a[0].Count != 6 || a[0].Limit != 2 {
		t.Fatalf("active %+v", a)
	}
	// Shadow clears the mark; enforcing again, the next message alerts.
	flood.Mode = ModeShadow
	reconf(flood)
	if r := s.Check(at(50), "lobby", "alice", "", false); !r.Allowed || r.Decisions[0].Allowed || len(s.Active(at(50))) != 0 {
		t.Fatalf("shadow: %+v, active %+v", r, s.Active(at(50)))
	}
	if a := observe(60); a != nil {
		t.Fatalf("a shadow policy alerted: %+v", a)
	}
	flood.Mode = ModeEnforce
	reconf(flood)
	if a := observe(70); len(a) != 1 || a[0].Count != 8 {
		t.Fatalf("enforcing again: %+v", a)
	}
	// A higher limit: the mark stays until a message is allowed.
	flood.Limit = 100
	reconf(flood)
	if a := s.Active(at(80)); len(a) != 0 {
		t.Fatalf("active under the new limit: %+v", a)
	}
	observe(90)
	flood.Limit = 2
	reconf(flood)
	if a := observe(100); len(a) != 1 {
		t.Fatalf("the allowed message did not clear the mark: %+v", a)
	}
	// The counters go by name, through a change that starts over too.
	for range 3 {
		check(110)
	}
	flood.Algorithm, flood.Resolution = AlgFixedWindow, 0
	reconf(flood)
	if d := check(120); !d.Allowed || d.Count != 0 {
		t.Fatalf("a new algorithm starts over: %+v", d)
	}
	if st := s.Stats()[0]; st.Allowed != 1 || st.Denied != 4 || st.ShadowDenied != 1 || st.Keys != 0 {
		t.Fatalf("stats %+v", st)
	}
	renamed := flood
	renamed.Name = "flood2"
	reconf(renamed)
	if st := s.Stats()[0]; st.Policy != "flood2" || st.Allowed+st.Denied != 0 {
		t.Fatalf("a new name: %+v", st)
	}
	if got := s.DecisionLabels(); !reflect.DeepEqual(got, []DecisionLabel{{"flood2", ResultAllowed}, {"flood2", ResultDenied}}) {
		t.Fatalf("labels %v", got)
	}
}

// A key of a room a policy no longer sees is kept but not listed: no call
// reaches it.
func TestReconfigureRoomsHideKeys(t *testing.T) {
	p := Policy{Name: "rooms", Scope: ScopeUserInRoom, Algorithm: AlgFixedWindow, Limit: 1, Window: time.Minute, Rooms: []string{"a*", "b*"}}
	s := mustSet(t, []Policy{p})
	for _, room := range []string{"a1", "a1", "b1", "b1"} {
		s.Observe(chat.Event{TS: at(0), Room: room, User: "u"})
	}
	if a := s.Active(at(1)); len(a) != 2 {
		t.Fatalf("active %+v", a)
	}
	p.Rooms = []string{"b*", "c*"}
	if err := s.Reconfigure([]Policy{p}); err != nil {
		t.Fatal(err)
	}
	if a := s.Active(at(1)); len(a) != 1 || a[0].Room != "b1" {
		t.Fatalf("active %+v", a)
	}
	if r := s.Check(at(1), "a1", "u", "", false); !r.Allowed || len(r.Decisions) != 0 {
		t.Fatalf("a room not seen: %+v", r)
	}
	if st := s.Stats()[0]; st.Keys != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A token bucket keeps its tokens, at most the new burst; a GCRA its TAT,
// the instant at which it is full again.
func TestReconfigureBuckets(t *testing.T) {
	tb := Policy{Name: "tb", Scope: ScopeUser, Algorithm: AlgTokenBucket, Limit: 1, Window: 10 * time.Second, Burst: 5}
	gcra := Policy{Name: "gcra", Scope: ScopeUser, Algorithm: AlgGCRA, Limit: 1, Window: 10 * time.Second, Burst: 5}
	s := mustSet(t, []Policy{tb, gcra})
	for range 3 { // 2 tokens left; full again at 30s
		s.Observe(chat.Event{TS: at(0), Room: "r", User: "u"})
	}
	tb.Burst, gcra.Burst = 3, 3
	tb.Limit, gcra.Limit = 2, 2
	if err := s.Reconfigure([]Policy{tb, gcra}); err != nil {
		t.Fatal(err)
	}
	r := s.Check(at(0), "r", "u", "", false)
	// The bucket: 2 tokens of 3, refilling at 2 per 10s; the GCRA: 30s
	// of waiting at 5s a token is 6 in use, more than 3, so denied until
	// 30s - τ (2 tokens of 5s) = 20s.
	if d := decision(t, r, "tb"); !d.Allowed || d.Count != 1 || d.Limit != 3 {
		t.Errorf("token bucket %+v", d)
	}
	if d := decision(t, r, "gcra"); d.Allowed || d.Count != 3 || d.RetryAfterMs != 20_000 {
		t.Errorf("gcra %+v", d)
	}
}

// Policies that are not valid are refused with NewSet's error, and change
// nothing at all; policies equal to those in force change nothing either.
func TestReconfigureRefuses(t *testing.T) {
	s := mustSet(t, statePolicies(), WithMaxKeys(50))
	tr := &stateTrace{r: rand.New(rand.NewPCG(5, 6))}
	for range 30 {
		s.ObserveBatch(tr.events(), nil, nil)
	}
	s.Check(at(tr.now), "r0", "u0", "spam", true)
	twin := reload(t, s, WithMaxKeys(50))
	before, saved, stats := s.state.Load(), s.AppendState(nil), s.Stats()
	good := statePolicies()
	badLimit := slices.Clone(good)
	badLimit[len(good)-1].Limit = 0
	badRooms := slices.Clone(good)
	badRooms[2].Rooms = []string{"ok", "no["}
	badName := append(slices.Clone(good), Policy{Name: "a b", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 1, Window: time.Second})
	badRes := slices.Clone(good)
	badRes[0].Resolution = 3 * time.Second
	for _, bad := range [][]Policy{badLimit, badRooms, badName, badRes, append(slices.Clone(good), good[3])} {
		_, want := NewSet(bad)
		err := s.Reconfigure(bad)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Fatalf("Reconfigure: %v; NewSet: %v", err, want)
		}
	}
	if err := s.Reconfigure(good); err != nil {
		t.Fatal(err)
	}
	if s.state.Load() != before || !bytes.Equal(s.AppendState(nil), saved) || !reflect.DeepEqual(s.Stats(), stats) {
		t.Fatal("the state changed")
	}
	for step := range 200 { // and every answer is the twin's, loaded from before
		evs := tr.events()
		var got, want []string
		s.ObserveBatch(evs, func(i int, a Alert) { got = append(got, fmt.Sprint(i, a)) }, nil)
		twin.ObserveBatch(evs, func(i int, a Alert) { want = append(want, fmt.Sprint(i, a)) }, nil)
		room, user, text := tr.names()
		now := at(tr.now + tr.r.Int64N(2000))
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(s.Check(now, room, user, text, true), twin.Check(now, room, user, text, true)) ||
			!reflect.DeepEqual(s.Active(now), twin.Active(now)) || !reflect.DeepEqual(keyStats(s), keyStats(twin)) {
			t.Fatalf("step %d: the refused Set answers otherwise", step)
		}
	}
}

// Concurrent calls see the old policies or the new ones, whole, and no
// message is lost: a group policy kept through every change counts all.
func TestReconfigureConcurrent(t *testing.T) {
	all := Policy{Name: "all", Scope: ScopeGroup, Algorithm: AlgSlidingWindow, Limit: MaxLimit, Window: time.Hour, Resolution: time.Second}
	a := []Policy{all,
		{Name: "a-flood", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 3, Window: time.Second},
		{Name: "dup", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 1, Window: time.Second},
		{Name: "tb", Scope: ScopeUserInRoom, Algorithm: AlgTokenBucket, Limit: 2, Window: time.Second, Burst: 3},
	}
	b := []Policy{
		{Name: "tb", Scope: ScopeUserInRoom, Algorithm: AlgTokenBucket, Limit: 1, Window: time.Second, Burst: 1, Mode: ModeShadow},
		{Name: "dup", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 2, Window: time.Second, Rooms: []string{"r1"}},
		{Name: "b-flood", Scope: ScopeRoom, Algorithm: AlgSlidingWindowCounter, Limit: 5, Window: time.Second},
		all,
	}
	lists := [][]Policy{a, b}
	// names is the policies' names in order. (Every one of them decides
	// a check in room r1 with a text.)
	names := func(ps []Policy) string {
		var n []string
		for _, p := range ps {
			n = append(n, p.Name)
		}
		return strings.Join(n, ",")
	}
	s := mustSet(t, a, WithMaxKeys(100))
	rounds := 300
	if raceEnabled {
		rounds = 100
	}
	done := make(chan struct{})
	var wg, observers sync.WaitGroup
	var observed, reconfigs atomic.Int64
	for g := range 3 {
		observers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			// Until ten reconfigurations at least ran meanwhile, however
			// the scheduler shares the cores.
			for i := 0; i < rounds || reconfigs.Load() < 10; i++ {
				evs := make([]chat.Event, 1+r.IntN(2*batchChunk))
				for k := range evs {
					evs[k] = chat.Event{TS: at(int64(min(i, rounds-1))), Room: fmt.Sprint("r", r.IntN(3)), User: fmt.Sprint("u", r.IntN(20)), Text: fmt.Sprint(r.IntN(3))}
				}
				seen := map[string]bool{}
				s.ObserveBatch(evs, func(_ int, al Alert) { seen[al.Policy] = true }, nil)
				if seen["a-flood"] && seen["b-flood"] {
					t.Error("a batch alerted for the policies of both lists")
				}
				observed.Add(int64(len(evs)))
				if r.IntN(10) == 0 {
					s.Sweep(at(int64(min(i, rounds-1))))
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			res := s.Check(at(0), "r1", "u1", "hi", true)
			var got []Policy
			for _, d := range res.Decisions {
				got = append(got, Policy{Name: d.Policy})
			}
			if n := names(got); n != names(a) && n != names(b) {
				t.Errorf("decisions of %s", n)
			}
			var stats []Policy
			for _, st := range s.Stats() {
				stats = append(stats, Policy{Name: st.Policy})
			}
			if n := names(stats); n != names(a) && n != names(b) {
				t.Errorf("stats of %s", n)
			}
			if i%20 == 0 {
				saved := s.AppendState(nil)
				ok := false
				for _, ps := range lists {
					ok = ok || mustSet(t, ps, WithMaxKeys(100)).LoadState(saved) == nil
				}
				if !ok {
					t.Error("a saved state is of neither list")
				}
				s.Active(at(0))
			}
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := s.Reconfigure(lists[i%2]); err != nil {
				t.Error(err)
			}
			reconfigs.Add(1)
			time.Sleep(100 * time.Microsecond) // pace: reconfigurations all through the observers' run
		}
	})
	observers.Wait()
	close(done)
	wg.Wait()
	if d := decision(t, s.Check(at(int64(rounds)), "r0", "u0", "", false), "all"); d.Count != observed.Load() {
		t.Errorf("all counts %d messages of %d", d.Count, observed.Load())
	}
	verifySet(t, s)
}
