package throttle

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// The measures of similar (docs/contract.md, "Alike"): how often a Set
// finds texts alike at the default similarity, by their exact share, and
// what a similar policy costs a room's Observe.
//
//	go test -run TestSimilarRecall -v ./throttle/
//	go test -run '^$' -bench BenchmarkSimilarObserve -benchtime 200000x ./throttle/

// sharePair returns two texts of (num+den)k word pairs each, all
// distinct, whose sets share exactly num/den of their union: b has a run
// of 2num·k+1 of a's words, at the same place, and new words around it,
// so they share 2num·k pairs of 2(num+den)k - 2num·k.
func sharePair(g *textGen, num, den, k int) (a, b string) {
	n := (den+num)*k + 1 // words
	m := 2*num*k + 1     // shared words, in one run
	seen := map[string]bool{}
	word := func() string {
		for {
			if w := g.plain(); !seen[strings.ToLower(w)] {
				seen[strings.ToLower(w)] = true
				return w
			}
		}
	}
	wa := make([]string, n)
	for i := range wa {
		wa[i] = word()
	}
	off := g.r.IntN(n - m + 1) // where the run starts, in b as in a
	wb := make([]string, n)
	for i := range wb {
		if i >= off && i < off+m {
			wb[i] = wa[i]
		} else {
			wb[i] = word()
		}
	}
	return g.write(wa), g.write(wb)
}

// TestSimilarRecall: pairs of texts of exact shares 0.5 to 0.95, short
// (up to 128 pairs: every pair hashed) and long (a sample), each posted
// in a room of its own and the other checked there, by a similar policy
// of the default similarity 0.8 and limit 1. Shares of 0.95 are always
// found alike and shares of 0.5 never; it logs the table of
// docs/contract.md.
func TestSimilarRecall(t *testing.T) {
	per := 400
	if testing.Short() || raceEnabled {
		per = 60
	}
	s := mustSet(t, []Policy{{Name: "sim", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 1, Window: time.Hour}})
	g := &textGen{r: rand.New(rand.NewPCG(15, 16))}
	room := 0
	t.Logf("| share | short texts found alike | long texts found alike |")
	t.Logf("|---|---|---|")
	for _, share := range []struct{ num, den int }{{1, 2}, {7, 10}, {4, 5}, {9, 10}, {19, 20}} {
		var found, tried [2]int // short, long
		for i := range 2 * per {
			long := i%2 == 1
			// Pairs per text: (num+den)k; short texts from 3 pairs up to
			// 128, long ones past 128 up to 400.
			unit := share.num + share.den
			k := 1 + g.r.IntN(max(1, simK/unit))
			if long {
				k = simK/unit + 1 + g.r.IntN(400/unit-simK/unit)
			}
			a, b := sharePair(g, share.num, share.den, k)
			if both, union := oracleShare(a, b); both*share.den != union*share.num {
				t.Fatalf("sharePair %d/%d: %d of %d", share.num, share.den, both, union)
			}
			room++
			r := fmt.Sprint("room", room)
			s.Observe(chat.Event{TS: at(0), Room: r, User: "first", Text: a})
			d := decision(t, s.Check(at(1), r, "second", b, true), "sim")
			j := 0
			if long {
				j = 1
			}
			tried[j]++
			if !d.Allowed {
				found[j]++
			}
		}
		f := float64(share.num) / float64(share.den)
		pct := func(j int) string {
			return fmt.Sprintf("%.1f%% (%d of %d)", 100*float64(found[j])/float64(tried[j]), found[j], tried[j])
		}
		t.Logf("| %.2f | %s | %s |", f, pct(0), pct(1))
		switch {
		case f >= 0.95 && found != tried:
			t.Errorf("share %.2f: %v of %v found alike, want all", f, found, tried)
		case f < 0.55 && found != [2]int{}:
			t.Errorf("share %.2f: %v of %v found alike, want none", f, found, tried)
		}
	}
}

// simBenchText makes chat lines of 3 to 15 words from a vocabulary of
// 2,000 with Zipf-skewed use (s = 1.1), and now and then (1 in 20) one of
// a few spam lines, pasted with a changed word.
func simBenchText(r *rand.Rand, z *rand.Zipf) string {
	var b strings.Builder
	if r.IntN(20) == 0 {
		fmt.Fprintf(&b, "free nitro giveaway at discord-gift%d.example click now before it ends %d", r.IntN(3), r.IntN(100))
		return b.String()
	}
	for w := range 3 + r.IntN(13) {
		if w > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "w%d", z.Uint64())
	}
	return b.String()
}

// BenchmarkSimilarObserve is the cost of a similar policy on a room at
// 1,000 messages a second from 500 users (window 1m: 60,000 messages
// held): the default policies alone and with the similar policy, on the
// same events in alternating chunks of 4,096 (as BenchmarkSideBySide), after
// a warm-up of one window. It reports each one's CPU time per event (the
// process's, garbage collection included: on a shared machine it varies
// less than the wall clock) and the difference, what similar adds.
func BenchmarkSimilarObserve(b *testing.B) {
	const rate, warm = 1000, 60_000
	r := rand.New(rand.NewPCG(21, 22))
	z := rand.NewZipf(r, 1.1, 1, 1999)
	evs := make([]chat.Event, 1<<17)
	for i := range evs {
		evs[i] = chat.Event{Room: "lobby", User: fmt.Sprint("user-", r.IntN(500)), Text: simBenchText(r, z)}
	}
	without := mustSet(b, DefaultPolicies())
	with := mustSet(b, append(DefaultPolicies(), Policy{Name: "alike", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 10, Window: time.Minute}))
	sideBySide(b, warm, without, with, "similar", func(s *Set, from, to int) {
		for i := from; i < to; i++ {
			e := evs[i&(len(evs)-1)]
			e.TS = benchBase + int64(i)*1000/rate
			s.Observe(e)
		}
	})
	k := with.state.Load().stores[len(DefaultPolicies())].(*simStore).keys["lobby"]
	b.ReportMetric(float64(len(k.recs)-k.head), "held")
	b.ReportMetric(float64(len(k.groups)-len(k.free)), "groups")
	b.ReportMetric(float64(k.post.keys()), "index-keys")
}
