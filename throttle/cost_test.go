package throttle

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/measure"
)

// refCarried are the counts of a text, as the reference knows them: from
// how randomMessage wrote it, never by reading it.
type refCarried struct{ chars, links, newlines, emoji int64 }

// A refToken is a piece of a random text and what it carries.
type refToken struct {
	text string
	refCarried
}

// refTokens are the pieces of random texts: multi-byte code points,
// symbols that are emoji and symbols that are not (€→½∑#1), sequences of several
// code points, URLs with a scheme and without, schemes with nothing
// after them, an invalid byte.
var refTokens = []refToken{
	{"hi", refCarried{chars: 2}},
	{"GG", refCarried{chars: 2}},
	{"é", refCarried{chars: 1}},
	{"日本語", refCarried{chars: 3}},
	{"€→½∑#1", refCarried{chars: 6}},
	{"★", refCarried{chars: 1, emoji: 1}}, // Extended_Pictographic, though no emoji by default
	{"😀", refCarried{chars: 1, emoji: 1}},
	{"👍🏽", refCarried{chars: 2, emoji: 1}},    // a skin tone modifier is no pictograph
	{"❤️", refCarried{chars: 2, emoji: 1}},    // nor a variation selector
	{"👨‍👩‍👧", refCarried{chars: 5, emoji: 3}}, // three people, two joiners
	{"©", refCarried{chars: 1, emoji: 1}},
	{"\n", refCarried{chars: 1, newlines: 1}},
	{"\xff", refCarried{chars: 1}},
	{"http://a.b", refCarried{chars: 10, links: 1}},
	{"HTTPS://x.y/z?q=1", refCarried{chars: 17, links: 1}},
	{"see:https://e.f", refCarried{chars: 15, links: 1}},
	{"www.example.com", refCarried{chars: 15}},
	{"example.com/x", refCarried{chars: 13}},
	{"http://", refCarried{chars: 7}}, // a space or the end follows
	{"ftp://g.h", refCarried{chars: 9}},
	{"http:/h", refCarried{chars: 7}},
}

// randomMessage writes a random text of refTokens, separated by spaces,
// and notes its counts in carried; and random mentions, repeated ones
// among them.
func randomMessage(r *rand.Rand, carried map[string]refCarried) (string, []string) {
	var parts []string
	var c refCarried
	for i := range r.IntN(7) {
		tok := refTokens[r.IntN(len(refTokens))]
		parts = append(parts, tok.text)
		c.chars += tok.chars + int64(min(i, 1)) // and the space before it
		c.links += tok.links
		c.newlines += tok.newlines
		c.emoji += tok.emoji
	}
	text := strings.Join(parts, " ")
	carried[text] = c
	var mentions []string
	for range r.IntN(5) {
		mentions = append(mentions, []string{"a", "b", "@room", "b", "a"}[r.IntN(5)])
	}
	return text, mentions
}

// refCost is what a message with counts c that mentions mentions costs
// with weights w: the default weighs one per message.
func refCost(w Cost, c refCarried, mentions []string) int64 {
	if w == (Cost{}) {
		return 1
	}
	distinct := map[string]bool{}
	for _, m := range mentions {
		distinct[m] = true
	}
	return int64(w.Messages) + int64(w.Mentions)*int64(len(distinct)) + int64(w.Links)*c.links +
		int64(w.Newlines)*c.newlines + int64(w.Chars)*c.chars + int64(w.Emoji)*c.emoji
}

// randomWeights are the random weights of a policy: sometimes the
// default, else a few of the six, small enough that small limits are
// crossed and not crossed.
func randomWeights(r *rand.Rand) Cost {
	if r.IntN(4) == 0 {
		return Cost{}
	}
	for {
		var c Cost
		for _, f := range costFields {
			if r.IntN(3) == 0 {
				c.set(f, r.IntN(3))
			}
		}
		if c != (Cost{}) && !c.unit() {
			return c
		}
	}
}

// The reference's counts of its pieces are what package measure counts:
// if they were not, the reference would be wrong, not the throttle.
func TestRefTokensCarry(t *testing.T) {
	for _, tok := range refTokens {
		got := measure.Of(tok.text, nil, measure.CountChars|measure.CountLinks|measure.CountNewlines|measure.CountEmoji)
		want := refCarried{chars: int64(got.Chars), links: int64(got.Links), newlines: int64(got.Newlines), emoji: int64(got.Emoji)}
		if want != tok.refCarried {
			t.Errorf("%q: measure counts %+v, the reference %+v", tok.text, want, tok.refCarried)
		}
	}
}

// A cost is in the policies file as the contract writes it; the weights
// not named are 0, and {messages: 1} is the default.
func TestParseCost(t *testing.T) {
	ps, err := ParsePolicies("p.yaml", []byte(`policies:
  - name: mentions
    scope: user_in_room
    algorithm: sliding_window
    limit: 10
    window: 10s
    cost: {mentions: 1}
  - name: pressure
    scope: user
    algorithm: gcra
    limit: 100
    burst: 60
    window: 1m
    cost:
      messages: 1
      mentions: 2
      links: 5
      newlines: 1
      chars: 0
      emoji: 1
  - name: plain
    scope: user
    algorithm: fixed_window
    limit: 5
    window: 1s
    cost: {messages: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Cost{{Mentions: 1}, {Messages: 1, Mentions: 2, Links: 5, Newlines: 1, Emoji: 1}, {}}
	for i, p := range ps {
		if p.Cost != want[i] {
			t.Errorf("%s: cost %+v, want %+v", p.Name, p.Cost, want[i])
		}
	}
	if got := want[1].String(); got != "{messages: 1, mentions: 2, links: 5, newlines: 1, emoji: 1}" {
		t.Errorf("String: %s", got)
	}
}

// Bad weights are refused naming the policy, the field and its line.
func TestParseCostErrors(t *testing.T) {
	policy := func(cost string) string {
		return "policies:\n  - name: ok\n    scope: user\n    algorithm: sliding_window\n    limit: 10\n    window: 10s\n" +
			"  - name: p\n    scope: user\n    algorithm: token_bucket\n    limit: 10\n    window: 1s\n" + cost
	}
	wave := "policies:\n  - name: w\n    scope: room\n    algorithm: join_wave\n    limit: 10\n    window: 1m\n    cost: {messages: 2}\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"negative", policy("    cost: {mentions: -1}\n"), `policies.yaml:12: policies[1].cost.mentions: -1 is out of range (0 to 1000000)`},
		{"too large", policy("    cost: {links: 1000001}\n"), `policies.yaml:12: policies[1].cost.links: 1000001 is out of range (0 to 1000000)`},
		{"unknown", policy("    cost: {pings: 1}\n"), `policies.yaml:12: policies[1].cost.pings: unknown weight (valid: messages, mentions, links, newlines, chars, emoji)`},
		{"float", policy("    cost: {chars: 0.5}\n"), `policies.yaml:12: policies[1].cost.chars: "0.5" is not an integer`},
		{"text", policy("    cost:\n      emoji: lots\n"), `policies.yaml:13: policies[1].cost.emoji: "lots" is not an integer`},
		{"list", policy("    cost: {emoji: [1]}\n"), `policies.yaml:12: policies[1].cost.emoji: "" is not an integer`},
		{"twice", policy("    cost: {emoji: 1, emoji: 2}\n"), `policies.yaml:12: policies[1].cost.emoji: defined twice`},
		{"not a mapping", policy("    cost: 5\n"), `policies.yaml:12: policies[1].cost: want a mapping of weights`},
		{"all zero", policy("    cost: {messages: 0, links: 0}\n"), `policies.yaml:12: policies[1].cost: every weight is 0`},
		{"empty", policy("    cost: {}\n"), `policies.yaml:12: policies[1].cost: every weight is 0`},
		{"join_wave", wave, `policies.yaml:7: policies[0].cost: a join_wave counts joins`},
		{"spike", "policies:\n  - name: s\n    scope: room\n    algorithm: spike\n    window: 1m\n    baseline: 1h\n    cost: {messages: 2}\n", `policies.yaml:7: policies[0].cost: a spike compares a room's message rates`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParsePolicies("policies.yaml", []byte(c.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("error\n got %v\nwant %s...", err, c.want)
			}
		})
	}
}

// A Set refuses a bad weight at start and on Reconfigure, whole, naming
// the policy and the field; a changed cost starts the policy afresh.
func TestReconfigureCost(t *testing.T) {
	good := []Policy{
		{Name: "a", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 3, Window: time.Second, Cost: Cost{Mentions: 1}},
		{Name: "b", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 3, Window: time.Second},
	}
	s := mustSet(t, good)
	s.Observe(chat.Event{TS: at(0), Room: "r", User: "u", Mentions: []string{"x", "y", "z"}})
	s.Observe(chat.Event{TS: at(0), Room: "r", User: "u"})
	saved := s.AppendState(nil)
	bad := slices.Clone(good)
	bad[1].Cost = Cost{Links: -2}
	for _, err := range []error{s.Reconfigure(bad), func() error { _, err := NewSet(bad); return err }()} {
		if err == nil || err.Error() != `policy "b": cost.links: -2 is out of range (0 to 1000000)` {
			t.Fatalf("a negative weight: %v", err)
		}
	}
	if !bytes.Equal(s.AppendState(nil), saved) {
		t.Fatal("a refused reload changed the state")
	}
	check := func(want ...int64) {
		t.Helper()
		res := s.Decide(at(1), Query{Room: "r", User: "u"})
		for i, d := range res.Decisions {
			if d.Count != want[i] {
				t.Fatalf("%s holds %d, want %d", d.Policy, d.Count, want[i])
			}
		}
	}
	check(3, 2)
	same := slices.Clone(good)
	same[0].Limit, same[1].Cost = 5, Cost{Messages: 1} // the default, spelt out
	if err := s.Reconfigure(same); err != nil {
		t.Fatal(err)
	}
	check(3, 2)
	changed := slices.Clone(good)
	changed[0].Cost, changed[1].Cost = Cost{Mentions: 2}, Cost{Chars: 1}
	if err := s.Reconfigure(changed); err != nil {
		t.Fatal(err)
	}
	check(0, 0)
}

// A check is decided for its message's cost; one without text or
// mentions costs its messages weight; one that costs nothing is allowed
// whatever the key holds, during a penalty too, and is not counted; a
// message that alone costs more than the limit is denied, and its
// retry-after is when one of the limit's cost fits.
func TestCheckCosts(t *testing.T) {
	p := Policy{Name: "m", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 4, Window: 10 * time.Second,
		Cost: Cost{Mentions: 1, Links: 2}, Penalty: 30 * time.Second}
	s := mustSet(t, []Policy{p})
	q := func(text string, mentions ...string) Query {
		return Query{Room: "r", User: "u", Text: text, HasText: true, Mentions: mentions}
	}
	decide := func(now int64, q Query) Decision { return decision(t, s.Decide(at(now), q), "m") }
	if d := decide(0, q("see http://a and https://b", "x", "x", "y")); d.Allowed || d.Count != 0 || d.Remaining != 4 || d.RetryAfterMs != 0 {
		t.Fatalf("6 alone over a limit of 4: %+v", d)
	}
	if alerts := s.Observe(chat.Event{TS: at(0), Room: "r", User: "u", Text: "http://a", Mentions: []string{"x"}}); len(alerts) != 0 {
		t.Fatalf("3 of 4: alerts %+v", alerts)
	}
	if d := decide(1000, q("", "x")); !d.Allowed || d.Count != 3 || d.Remaining != 1 {
		t.Fatalf("1 more: %+v", d)
	}
	if d := decide(1000, q("", "x", "y")); d.Allowed || d.Count != 3 || d.RetryAfterMs != 9000 {
		t.Fatalf("2 more: %+v", d)
	}
	if d := decide(1000, Query{Room: "r", User: "u", Text: "http://a"}); !d.Allowed {
		t.Fatalf("without text nor mentions, the messages weight, 0: %+v", d)
	}
	alerts := s.Observe(chat.Event{TS: at(1000), Room: "r", User: "u", Mentions: []string{"x", "y"}})
	if len(alerts) != 1 || alerts[0].Count != 5 || alerts[0].Cost != 2 || alerts[0].Until == nil || int64(*alerts[0].Until) != at(31_000) {
		t.Fatalf("the crossing: %+v, want count 5 and the crossing message's cost, 2", alerts)
	}
	if d := decide(20_000, q("hi")); !d.Allowed || d.Count != 0 {
		t.Fatalf("a free message during the penalty: %+v", d)
	}
	if d := decide(20_000, q("", "x")); d.Allowed || d.RetryAfterMs != 11_000 {
		t.Fatalf("one mention during the penalty: %+v", d)
	}
	for range 100 { // free messages count nothing, nor clear the mark
		if alerts := s.Observe(chat.Event{TS: at(20_000), Room: "r", User: "u", Text: "hi"}); len(alerts) != 0 {
			t.Fatalf("a free message alerts: %+v", alerts)
		}
	}
	if a := s.Active(at(20_000)); len(a) != 1 || a[0].Count != 0 {
		t.Fatalf("active: %+v", a)
	}
	exempt := Policy{Name: "m", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 4, Window: 10 * time.Second,
		Cost: Cost{Mentions: 1}, ExemptRoles: []string{"mod"}}
	s = mustSet(t, []Policy{exempt})
	if d := decision(t, s.Decide(at(0), Query{Room: "r", User: "u", Mentions: []string{"a", "b", "c", "d", "e"}, Roles: []string{"mod"}}), "m"); !d.Allowed || !d.Exempt {
		t.Fatalf("exempt: %+v", d)
	}
}

// costPolicies are a policy of every algorithm and scope, each with
// weights of r's.
func costPolicies(r *rand.Rand) []Policy {
	ps := append(allPolicies(),
		Policy{Name: "dup", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 3, Window: 2 * time.Second},
		Policy{Name: "dupg", Scope: ScopeGroup, Algorithm: AlgRepeat, Limit: 5, Window: time.Second})
	for i := range ps {
		ps[i].Cost = randomWeights(r)
	}
	ps[0].Cost = Cost{Mentions: 1, Emoji: 1}
	return ps
}

// FuzzLoadStateCosts is FuzzLoadState with policies that weigh what
// messages carry: the costs that repeat keys and consumed ids keep.
func FuzzLoadStateCosts(f *testing.F) {
	opt := WithMaxKeys(64)
	ps := costPolicies(rand.New(rand.NewPCG(3, 32)))
	s := mustSet(f, ps, opt)
	r, carried := rand.New(rand.NewPCG(1, 1)), map[string]refCarried{}
	for i := range 300 {
		text, mentions := randomMessage(r, carried)
		q := Query{Room: fmt.Sprint("r", r.IntN(3)), User: fmt.Sprint("u", r.IntN(3)), Text: text, HasText: true, Mentions: mentions}
		if i%2 == 0 {
			s.Observe(chat.Event{TS: at(int64(i * 7)), Room: q.Room, User: q.User, Text: text, Mentions: mentions})
		} else {
			s.Consume(at(int64(i*7)), q, fmt.Sprint("m", i))
		}
		if i%50 == 0 {
			f.Add(s.AppendState(nil))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkLoaded(t, ps, opt, b) })
}

// TestCostStateRoundTrip: a Set of every algorithm with costs, fed
// messages of random texts and mentions and consuming checks, and a copy
// saved and loaded now and then answer alike; the copy takes back a
// consumed message's whole cost (Unconsume), as the original does.
func TestCostStateRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 32))
	orig := mustSet(t, costPolicies(r))
	carried := map[string]refCarried{}
	var copied *Set
	now, nextID, taken := int64(0), 0, 0
	for step := range 3000 {
		if step%500 == 100 {
			copied = reload(t, orig)
		}
		now += []int64{0, 1, 20, 300}[r.IntN(4)]
		room, user := fmt.Sprint("r", r.IntN(3)), fmt.Sprint("u", r.IntN(4))
		text, mentions := randomMessage(r, carried)
		q := Query{Room: room, User: user, Text: text, HasText: true, Mentions: mentions}
		both := func(f func(s *Set) any) {
			want := f(orig)
			if copied != nil {
				if got := f(copied); !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d: got %+v, want %+v", step, got, want)
				}
			}
		}
		switch r.IntN(4) {
		case 0:
			e := chat.Event{TS: at(now - r.Int64N(300)), Room: room, User: user, Text: text, Mentions: mentions}
			both(func(s *Set) any { return s.Observe(e) })
		case 1:
			both(func(s *Set) any { return s.Decide(at(now), q) })
		default:
			nextID++
			id := fmt.Sprint("c", nextID)
			both(func(s *Set) any { res, _, alerts := s.Consume(at(now), q, id); return []any{res, alerts} })
			if r.IntN(3) == 0 {
				both(func(s *Set) any {
					if s.Unconsume(q, id) {
						taken++
					}
					return s.Decide(at(now), q)
				})
			}
		}
	}
	if !bytes.Equal(copied.AppendState(nil), orig.AppendState(nil)) {
		t.Error("the states saved at the end differ")
	}
	if taken == 0 {
		t.Error("nothing taken back: Unconsume is not tested")
	}
}

// BenchmarkObserveStreamCost is BenchmarkObserveStreamBatch through the
// default policies and two more, each with weights (weighted) and without
// (plain): the difference is what weighing what a message carries costs
// an event (its text's code points, links, newlines and emoji counted
// once for both policies, and each priced).
func BenchmarkObserveStreamCost(b *testing.B) {
	plain := append(DefaultPolicies(),
		Policy{Name: "pressure", Scope: ScopeUser, Algorithm: AlgGCRA, Limit: 60, Burst: 30, Window: time.Minute},
		Policy{Name: "walls_of_text", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 4000, Window: time.Minute})
	weighted := slices.Clone(plain)
	weighted[3].Cost = Cost{Messages: 1, Mentions: 2, Links: 5, Newlines: 1, Emoji: 1}
	weighted[4].Cost = Cost{Chars: 1}
	for _, c := range []struct {
		name string
		ps   []Policy
	}{{"plain", plain}, {"weighted", weighted}} {
		b.Run(c.name, func(b *testing.B) {
			benchStreamOf(b, c.ps, func(s *Set, evs []chat.Event) { s.ObserveBatch(evs, func(int, Alert) {}, nil) })
		})
	}
}
