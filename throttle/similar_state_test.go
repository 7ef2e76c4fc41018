package throttle

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// TestSimilarStateRoundTrip runs a Set of similar policies (room and user
// scope, one with a penalty, one shadow) through a random trace of alike
// and unlike texts, late messages, consuming checks and sweeps, and beside
// it a copy saved and loaded into a fresh Set now and then, with a small
// key cap: from the first load on, every answer of the copy (alerts,
// checks, consuming checks, active keys, the counters of Stats) and its
// saved state are the original's.
func TestSimilarStateRoundTrip(t *testing.T) {
	steps := 3000
	if testing.Short() || raceEnabled {
		steps = 800
	}
	ps := []Policy{
		{Name: "wave", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 3, Window: 2 * time.Second, Penalty: 3 * time.Second},
		{Name: "paste", Scope: ScopeUser, Algorithm: AlgSimilar, Limit: 2, Window: time.Second, Similarity: 0.6, MinChars: 5},
		{Name: "quiet", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 1, Window: 1500 * time.Millisecond, Mode: ModeShadow},
	}
	opt := WithMaxKeys(6)
	orig := mustSet(t, ps, opt)
	var copied *Set
	r := rand.New(rand.NewPCG(9, 10))
	g := &textGen{r: r, most: 3}
	now := int64(0)
	alerts, active := 0, 0
	each := func(fn func(s *Set) any) (got, want any) {
		want = fn(orig)
		if copied != nil {
			got = fn(copied)
		} else {
			got = want
		}
		return got, want
	}
	for step := range steps {
		if step%250 == 100 {
			copied = reload(t, orig, opt)
		}
		now += r.Int64N(60)
		room, user := fmt.Sprint("r", r.IntN(3)), fmt.Sprint("u", r.IntN(8))
		var got, want any
		switch c := r.IntN(10); {
		case c < 5:
			e := chat.Event{TS: at(now - r.Int64N(300)), Room: room, User: user, Text: g.next()}
			got, want = each(func(s *Set) any { return s.Observe(e) })
			alerts += len(want.([]Alert))
		case c < 6:
			text, id := g.next(), fmt.Sprint("c", r.IntN(step+1))
			got, want = each(func(s *Set) any {
				res, rec, a := s.Consume(at(now), Query{Room: room, User: user, Text: text, HasText: true}, id)
				consumed := res.Consumed != nil && *res.Consumed
				res.Consumed = nil
				return fmt.Sprint(res, consumed, rec, a)
			})
		case c < 7:
			sweep := at(now + r.Int64N(3000))
			got, want = each(func(s *Set) any { return s.Sweep(sweep) })
		default:
			text, then := g.next(), at(now+r.Int64N(3000)-1000)
			got, want = each(func(s *Set) any { return s.Check(then, room, user, text, true) })
			if !reflect.DeepEqual(got, want) {
				break
			}
			got, want = each(func(s *Set) any { return s.Active(then) })
			active += len(want.([]Active))
			if reflect.DeepEqual(got, want) {
				got, want = each(func(s *Set) any { return keyStats(s) })
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: the copy answers\n %+v\nwant %+v", step, got, want)
		}
	}
	if !bytes.Equal(copied.AppendState(nil), orig.AppendState(nil)) {
		t.Error("the states saved at the end differ")
	}
	t.Logf("%d alerts, %d active keys seen; stats %v", alerts, active, keyStats(orig))
	if alerts == 0 || active == 0 {
		t.Errorf("%d alerts, %d active keys: the trace tests too little", alerts, active)
	}
}

// FuzzLoadSimilarState: a state of similar policies that loads is
// consistent, saves the same bytes and goes on deciding; one that does
// not leaves the Set empty.
func FuzzLoadSimilarState(f *testing.F) {
	ps := []Policy{
		{Name: "wave", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 2, Window: time.Second, Penalty: time.Second},
		{Name: "paste", Scope: ScopeUser, Algorithm: AlgSimilar, Limit: 1, Window: time.Second, MinChars: 3},
	}
	opt := WithMaxKeys(8)
	trace := func(s *Set, seed uint64, n int) {
		r := rand.New(rand.NewPCG(seed, 1))
		g := &textGen{r: r, most: 3}
		for i := range n {
			room, user := fmt.Sprint("r", r.IntN(3)), fmt.Sprint("u", r.IntN(5))
			if r.IntN(4) == 0 {
				s.Consume(at(int64(i*20)), Query{Room: room, User: user, Text: g.next(), HasText: true}, fmt.Sprint("c", i))
			} else {
				s.Observe(chat.Event{TS: at(int64(i*20) - r.Int64N(200)), Room: room, User: user, Text: g.next()})
			}
		}
	}
	s := mustSet(f, ps, opt)
	f.Add(s.AppendState(nil))
	for seed := range uint64(4) {
		trace(s, seed, 30)
		f.Add(s.AppendState(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkLoaded(t, ps, opt, b) })
}

// TestSimilarReconfigureCarries: a similar policy whose limit, similarity
// or mode changes keeps its windows (its checks are those of a Set of the
// new policy fed the same messages); one whose min_chars changes starts
// empty.
func TestSimilarReconfigureCarries(t *testing.T) {
	was := Policy{Name: "wave", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 3, Window: 2 * time.Second}
	for _, c := range []struct {
		now   Policy
		keeps bool
	}{
		{Policy{Name: "wave", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 2, Window: 2 * time.Second, Similarity: 0.7, Mode: ModeShadow}, true},
		{Policy{Name: "wave", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 5, Window: 2 * time.Second, Similarity: 0.9}, true},
		{Policy{Name: "wave", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 3, Window: 2 * time.Second, MinChars: 5}, false},
	} {
		s, fresh := mustSet(t, []Policy{was}), mustSet(t, []Policy{c.now})
		r := rand.New(rand.NewPCG(31, 32))
		// Texts that share 0.95 or more, or under 0.5: alike or not
		// whatever the Set's hash key, which each Set draws anew.
		g := &textGen{r: r, most: 3, clear: true}
		var texts []string
		for i := range 300 {
			e := chat.Event{TS: at(int64(i * 5)), Room: fmt.Sprint("r", r.IntN(2)), User: fmt.Sprint("u", r.IntN(6)), Text: g.next()}
			s.Observe(e)
			if c.keeps {
				fresh.Observe(e)
			}
			texts = append(texts, e.Text)
		}
		if err := s.Reconfigure([]Policy{c.now}); err != nil {
			t.Fatal(err)
		}
		verifySet(t, s)
		denied := 0
		for i, text := range texts {
			room := fmt.Sprint("r", i%2)
			got, want := s.Check(at(1500), room, "x", text, true), fresh.Check(at(1500), room, "x", text, true)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%+v: check %q\n got %+v\nwant %+v", c.now, text, got, want)
			}
			if !got.Decisions[0].Allowed {
				denied++
			}
		}
		if c.keeps && denied == 0 {
			t.Errorf("%+v: no check denied: the test tests too little", c.now)
		}
	}
}
