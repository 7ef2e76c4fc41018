package throttle

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// spikePolicies are a spike (window 10s, baseline 60s: n 10 buckets, N
// 60) and a policy it turns on for everyone (new_members as long as it
// goes), beside a plain flood policy.
func spikePolicies(factor float64, minMessages, minUsers int) []Policy {
	return []Policy{
		{Name: "flood", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 6, Window: 10 * time.Second},
		{Name: "surge", Scope: ScopeRoom, Algorithm: AlgSpike, Window: 10 * time.Second, Baseline: time.Minute, Factor: factor, MinMessages: minMessages, MinUsers: minUsers},
		{Name: "calm", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 2, Window: 10 * time.Second, NewMembers: MaxWindow},
	}
}

// surge keeps the spike's alerts, or Active entries.
func surge[T interface{ Alert | Active }](xs []T) []T {
	out := []T{}
	for _, x := range xs {
		if any(x).(interface{ policy() string }).policy() == "surge" {
			out = append(out, x)
		}
	}
	return out
}

func (a Alert) policy() string  { return a.Policy }
func (a Active) policy() string { return a.Policy }

func decided(res Result) (out []string) {
	for _, d := range res.Decisions {
		out = append(out, d.Policy)
	}
	return out
}

// A room with no past crosses on min_messages and min_users alone; one
// with a past, at factor times its rate, a tie included; the crossing
// alerts once, says why, lists the room in Active and turns calm on, and
// the spike is in no decision.
func TestSpike(t *testing.T) {
	s := mustSet(t, spikePolicies(2.5, 4, 2))
	msg := func(ms int64, user string) []Alert {
		return surge(s.Observe(chat.Event{Room: "lobby", User: user, TS: at(ms), Text: "hi"}))
	}
	for i, u := range []string{"a", "a", "a"} {
		if a := msg(int64(i), u); len(a) != 0 {
			t.Fatalf("message %d: %+v", i, a)
		}
	}
	if a := msg(3, "a"); len(a) != 0 { // four messages, but one user
		t.Fatalf("one user: %+v", a)
	}
	a := msg(4, "b")
	want := Alert{Policy: "surge", Room: "lobby", Count: 5, Limit: 4, At: ct(4), Spike: &Spike{Users: 2}}
	if len(a) != 1 || !reflect.DeepEqual(a[0], want) {
		t.Fatalf("no past, 5 messages from 2 users: %+v, want %+v", a, want)
	}
	if a := msg(5, "c"); len(a) != 0 {
		t.Fatalf("again: %+v", a)
	}
	res := s.Check(at(6), "lobby", "newbie", "", false)
	if !res.Allowed || fmt.Sprint(decided(res)) != "[flood calm]" {
		t.Fatalf("check during the spike: %+v, want flood and calm, allowed", res)
	}
	for _, l := range s.DecisionLabels() {
		if l.Policy == "surge" {
			t.Fatalf("decision labels of a spike, which decides nothing: %+v", s.DecisionLabels())
		}
	}
	act := surge(s.Active(at(6)))
	if len(act) != 1 || act[0].Policy != "surge" || act[0].Count != 6 || act[0].Spike == nil || act[0].Spike.Users != 3 {
		t.Fatalf("active: %+v", act)
	}
	// 10s later the six messages are the past: a rate of 6 per 50s, 1.2
	// per window; at factor 2.5, 3 messages are over (and min_messages 4).
	if res := s.Check(at(10_000), "lobby", "newbie", "", false); fmt.Sprint(decided(res)) != "[flood]" {
		t.Fatalf("check after the spike: %+v", res)
	}
	if act := surge(s.Active(at(10_000))); len(act) != 0 {
		t.Fatalf("active after: %+v", act)
	}
	for i, u := range []string{"a", "b", "c"} {
		if a := msg(int64(10_000+i), u); len(a) != 0 {
			t.Fatalf("message %d after: %+v", i, a)
		}
	}
	a = msg(10_003, "a")
	want = Alert{Policy: "surge", Room: "lobby", Count: 4, Limit: 4, At: ct(10_003), Spike: &Spike{Users: 3, BaselineMessages: 6, Expected: 1.2, Ratio: 3.333}}
	if len(a) != 1 || !reflect.DeepEqual(a[0], want) {
		t.Fatalf("against a past of 6: %+v, want %+v", a, want)
	}
}

// A tie at the factor is over, exactly, for factors with decimals: the
// w-th message of the window crosses, not the one before.
func TestSpikeTie(t *testing.T) {
	for _, c := range []struct {
		factor  float64
		past, w int // messages in the span (buckets 1 to 50), in the window at the tie: w = factor·past/5
	}{{1.1, 50, 11}, {2.5, 20, 10}, {1.001, 5000, 1001}, {3, 5, 3}, {1, 1, 1}} {
		s := mustSet(t, spikePolicies(c.factor, 1, 2))
		for i := range c.past { // one user: never over
			s.Observe(chat.Event{Room: "r", User: "p", TS: at(1000 + int64(i*50_000/c.past))})
		}
		var alerts []Alert
		for i := range c.w {
			alerts = append(alerts, surge(s.Observe(chat.Event{Room: "r", User: []string{"a", "b"}[min(i, 1)], TS: at(60_000 + int64(i*999/c.w))}))...)
		}
		if c.w == 1 { // one user in the window: never over
			if len(alerts) != 0 {
				t.Errorf("one user: %+v", alerts)
			}
			continue
		}
		if len(alerts) != 1 || alerts[0].At != ct(60_000+int64((c.w-1)*999/c.w)) || alerts[0].Limit != int64(c.w) || alerts[0].Spike.Ratio != c.factor {
			t.Errorf("factor %v, %d then %d: %+v, want the crossing at the last", c.factor, c.past, c.w, alerts)
		}
	}
}

// A spike's options: refused with the policy and the field named, in Go
// and in YAML.
func TestSpikePolicyErrors(t *testing.T) {
	good := Policy{Name: "s", Scope: ScopeRoom, Algorithm: AlgSpike, Window: time.Minute, Baseline: time.Hour}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := good.withDefaults(); p.Factor != 5 || p.MinMessages != 20 || p.MinUsers != 3 || p.Resolution != time.Second {
		t.Fatalf("defaults: %+v", p)
	}
	for _, c := range []struct {
		change func(p *Policy)
		want   string
	}{
		{func(p *Policy) { p.Baseline = 0 }, "baseline: missing"},
		{func(p *Policy) { p.Baseline = time.Minute }, "baseline: 1m0s is not longer than window 1m0s"},
		{func(p *Policy) { p.Baseline = 90 * time.Second; p.Resolution = time.Minute }, "resolution: baseline 1m30s is not a whole multiple of resolution 1m0s"},
		{func(p *Policy) { p.Baseline = 2 * time.Hour }, "baseline: baseline 2h0m0s at resolution 1s is 7200 buckets, more than 3600"},
		{func(p *Policy) { p.Factor = 0.5 }, "factor: 0.5 is out of range"},
		{func(p *Policy) { p.Factor = math.NaN() }, "factor: NaN is not a number"},
		{func(p *Policy) { p.Factor = 1.0005 }, "factor: 1.0005 has more than three decimals"},
		{func(p *Policy) { p.MinMessages = -1 }, "min_messages: -1 is out of range"},
		{func(p *Policy) { p.MinUsers = -2 }, "min_users: -2 is out of range"},
		{func(p *Policy) { p.Limit = 10 }, "limit: a spike has none"},
		{func(p *Policy) { p.Scope = ScopeUser }, "scope: a spike watches a room"},
		{func(p *Policy) { p.NewMembers = time.Minute }, "new_members: a spike decides no message"},
		{func(p *Policy) { p.Penalty = time.Minute }, "penalty: a spike decides no message"},
		{func(p *Policy) { p.ExemptUsers = []string{"mod"} }, "exempt_users: a spike decides no message"},
		{func(p *Policy) { p.Act = []ActKind{ActRedact} }, "act: a spike decides no message"},
		{func(p *Policy) { p.Algorithm, p.Limit = AlgSlidingWindow, 5 }, "baseline: only spike has a baseline, not sliding_window"},
	} {
		p := good
		c.change(&p)
		_, err := NewSet([]Policy{p})
		if err == nil || !strings.Contains(err.Error(), `policy "s": `+c.want) {
			t.Errorf("%+v: %v, want %q", p, err, c.want)
		}
	}
	policy := func(s string) string {
		return "policies:\n  - name: s\n    scope: room\n    algorithm: spike\n    window: 1m\n" + s
	}
	if ps, err := ParsePolicies("p.yaml", []byte(policy("    baseline: 1h\n    factor: 2.5\n    min_messages: 30\n    min_users: 4\n"))); err != nil ||
		ps[0].Factor != 2.5 || ps[0].MinMessages != 30 || ps[0].MinUsers != 4 || ps[0].Baseline != time.Hour || ps[0].Limit != 0 {
		t.Fatalf("%+v %v", ps, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"", "p.yaml:2: policies[0].baseline: missing"},
		{"    baseline: 1m\n", "p.yaml:6: policies[0].baseline: 1m0s is not longer than window 1m0s"},
		{"    baseline: 1h\n    factor: lots\n", `p.yaml:7: policies[0].factor: "lots" is not a number`},
		{"    baseline: 1h\n    factor: .nan\n", `p.yaml:7: policies[0].factor: NaN is not a number`},
		{"    baseline: 1h\n    factor: 0.9\n", `p.yaml:7: policies[0].factor: 0.9 is out of range (1 to 1000000)`},
		{"    baseline: 1h\n    factor: 0\n", `p.yaml:7: policies[0].factor: 0 is out of range (1 to 1000000)`},
		{"    baseline: 1h\n    min_messages: 0\n", `p.yaml:7: policies[0].min_messages: 0 is out of range (1 to 1000000)`},
		{"    baseline: 1h\n    min_users: x\n", `p.yaml:7: policies[0].min_users: "x" is not an integer`},
		{"    baseline: 1h\n    limit: 5\n", `p.yaml:7: policies[0].limit: a spike has none`},
		{"    baseline: soon\n", `p.yaml:6: policies[0].baseline: `},
	} {
		if _, err := ParsePolicies("p.yaml", []byte(policy(c.yaml))); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	// A reload with one refused changes nothing.
	s := mustSet(t, []Policy{good})
	bad := good
	bad.Factor = 0.5
	if err := s.Reconfigure([]Policy{good, {Name: "t", Scope: ScopeRoom, Algorithm: AlgSlidingWindow, Limit: 3, Window: time.Second}, bad}); err == nil {
		t.Fatal("a reload with a bad spike was taken")
	}
	if ps := s.Policies(); len(ps) != 1 {
		t.Fatalf("half applied: %+v", ps)
	}
}

// Reconfigure keeps a spike's rooms when its factor or minimums change,
// and the new numbers read them at once; a new baseline starts over.
func TestSpikeReconfigure(t *testing.T) {
	ps := spikePolicies(5, 3, 1)
	s := mustSet(t, ps)
	for i := range 4 {
		s.Observe(chat.Event{Room: "r", User: "u", TS: at(int64(i))})
	}
	if act := surge(s.Active(at(5))); len(act) != 1 {
		t.Fatalf("active: %+v", act)
	}
	ps[1].MinMessages = 5
	if err := s.Reconfigure(ps); err != nil {
		t.Fatal(err)
	}
	if act := surge(s.Active(at(5))); len(act) != 0 {
		t.Fatalf("active with min_messages 5: %+v", act)
	}
	if a := surge(s.Observe(chat.Event{Room: "r", User: "u", TS: at(6)})); len(a) != 0 {
		t.Fatalf("the fifth, still marked: %+v", a) // marked at the third, not unmarked since
	}
	if st := s.Stats()[1]; st.Keys != 1 {
		t.Fatalf("kept: %+v", st)
	}
	ps[1].Baseline = 2 * time.Minute
	if err := s.Reconfigure(ps); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats()[1]; st.Keys != 0 {
		t.Fatalf("a new baseline kept its rooms: %+v", st)
	}
}

// Memory follows the rooms that hold messages: a room at rest is
// forgotten, a flood's users are given back, the cap evicts.
func TestSpikeMemory(t *testing.T) {
	s := mustSet(t, spikePolicies(5, 20, 3), WithMaxKeys(3))
	for i := range 5000 {
		s.Observe(chat.Event{Room: "r", User: fmt.Sprint("bot", i), TS: at(int64(i))})
	}
	store := s.state.Load().stores[1].(*spikeStore)
	if r := store.rooms["r"]; r.users.n != 5000 || len(r.recent) != 5000 {
		t.Fatalf("%d users, %d messages", r.users.n, len(r.recent))
	}
	s.Observe(chat.Event{Room: "r", User: "u", TS: at(30_000)})
	if r := store.rooms["r"]; r.users.n != 1 || len(r.users.last) != 1 || len(r.recent) != 1 || len(r.past) != 5 || cap(r.recent) > 8 {
		t.Fatalf("after the flood: %d users (%d kept), %d messages (room for %d), %d buckets", r.users.n, len(r.users.last), len(r.recent), cap(r.recent), len(r.past))
	}
	for i := range 4 {
		s.Observe(chat.Event{Room: fmt.Sprint("x", i), User: "u", TS: at(31_000)})
	}
	if st := s.Stats()[1]; st.Keys != 3 || st.Evicted != 2 {
		t.Fatalf("over the cap: %+v", st)
	}
	s.Sweep(at(31_000 + 60_000))
	if st := s.Stats()[1]; st.Keys != 0 || st.Expired != 3 {
		t.Fatalf("swept: %+v", st)
	}
	verifySet(t, s)
}

// verify checks that w holds the users of newest, the bucket of each
// user's newest message in the window above floor, and stale entries no
// more than prune lets it.
func (w *windowUsers) verify(newest map[uint64]int64, floor int64) error {
	byBucket := map[int64]uint32{}
	for u, b := range newest {
		if got, ok := w.last[u]; !ok || got != b {
			return fmt.Errorf("user %x: newest %d, kept %d (%v)", u, b, got, ok)
		}
		byBucket[b]++
	}
	live := 0
	for _, b := range w.last {
		if b > floor {
			live++
		}
	}
	if live != len(newest) || w.n != int64(len(newest)) || int64(len(w.last)) > 2*w.n+64 {
		return fmt.Errorf("%d users, %d live entries of %d, n %d", len(newest), live, len(w.last), w.n)
	}
	for i, c := range w.newest {
		if c.n == 0 || byBucket[c.b] != c.n || i > 0 && c.b <= w.newest[i-1].b {
			return fmt.Errorf("newest %+v, want %v", w.newest, byBucket)
		}
	}
	if len(w.newest) != len(byBucket) {
		return fmt.Errorf("newest %+v, want %v", w.newest, byBucket)
	}
	return nil
}

// verify checks that a spike store is consistent: its list and map, each
// room's order, sums and users.
func (s *spikeStore) verify() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	var prev *spikeRoom
	for r := s.head; r != nil; prev, r = r, r.next {
		n++
		if r.prev != prev || s.rooms[r.name] != r {
			return fmt.Errorf("room %q: out of the list or the map", r.name)
		}
		base := int64(0)
		for i, c := range r.past {
			if c.n == 0 || c.b <= r.last-s.rule.span || c.b > r.last-s.rule.n || i > 0 && c.b <= r.past[i-1].b {
				return fmt.Errorf("room %q: past %+v (last %d)", r.name, r.past, r.last)
			}
			base += int64(c.n)
		}
		if base != r.base {
			return fmt.Errorf("room %q: base %d, sum %d", r.name, r.base, base)
		}
		newest := map[uint64]int64{}
		for i, p := range r.recent {
			if p.b <= r.last-s.rule.n || p.b > r.last || i > 0 && p.b < r.recent[i-1].b {
				return fmt.Errorf("room %q: recent %+v (last %d)", r.name, r.recent, r.last)
			}
			newest[p.user] = p.b
		}
		if err := r.users.verify(newest, r.last-s.rule.n); err != nil {
			return fmt.Errorf("room %q: %v", r.name, err)
		}
	}
	if n != len(s.rooms) || prev != s.tail {
		return fmt.Errorf("%d rooms in the list, %d in the map", n, len(s.rooms))
	}
	return nil
}

// FuzzLoadSpikeState loads any bytes into a Set with spikes: it must
// never panic, and what it accepts is a consistent state that saves as it
// was loaded and goes on.
func FuzzLoadSpikeState(f *testing.F) {
	ps := spikePolicies(2, 2, 1)
	s := mustSet(f, ps, WithMaxKeys(8))
	r := rand.New(rand.NewPCG(1, 1))
	for i := range 600 {
		e := chat.Event{Room: fmt.Sprint("r", r.IntN(10)), User: fmt.Sprint("u", r.IntN(5)), TS: at(int64(i*300) - r.Int64N(20_000)), ID: fmt.Sprint(i)}
		if i%3 == 0 {
			s.Consume(e.TS, Query{Room: e.Room, User: e.User}, e.ID)
		}
		s.Observe(e)
		if i%100 == 0 {
			f.Add(s.AppendState(nil))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := mustSet(t, ps, WithMaxKeys(8))
		if err := s.LoadState(b); err != nil {
			return
		}
		verifySet(t, s)
		if again := s.AppendState(nil); !bytes.Equal(again, b) {
			t.Fatalf("saves %x, loaded %x", again, b)
		}
		for i := range 50 {
			e := chat.Event{Room: fmt.Sprint("r", i%3), User: fmt.Sprint("u", i%4), TS: at(int64(i * 700))}
			s.Observe(e)
			s.Check(e.TS, e.Room, e.User, "", false)
		}
		s.Active(at(40_000))
		verifySet(t, s)
	})
}
