package throttle

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// verify checks that a similar store is consistent: its list and map of
// keys, each key's recs, groups, members and index.
func (t *simStore) verify() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	var prev *simKey
	for k := t.head; k != nil; prev, k = k, k.next {
		n++
		if k.prev != prev || t.keys[k.name] != k {
			return fmt.Errorf("key %q: not linked or not mapped", k.name)
		}
		if err := t.verifyKey(k); err != nil {
			return fmt.Errorf("key %q: %v", k.name, err)
		}
	}
	if prev != t.tail || n != len(t.keys) {
		return fmt.Errorf("%d keys listed, %d mapped", n, len(t.keys))
	}
	return nil
}

func (t *simStore) verifyKey(k *simKey) error {
	live := map[int32][]member{}
	for _, r := range k.recs[k.head:] {
		members := k.groups[r.g].members()
		i := len(live[r.g])
		if i >= len(members) || members[i].at != r.at {
			return fmt.Errorf("rec at %d of group %d is not its member %d", r.at, r.g, i)
		}
		live[r.g] = append(live[r.g], members[i])
	}
	free := map[int32]bool{}
	for _, gi := range k.free {
		free[gi] = true
	}
	posts, hashes := 0, 0
	block := map[int32]bool{} // the hash blocks held or free, by offset
	for c, offs := range k.hashes.free {
		for _, off := range offs {
			if block[off] || int(off)+1<<c > len(k.hashes.h) {
				return fmt.Errorf("free hash block at %d twice, or past the slab", off)
			}
			block[off] = true
		}
	}
	for gi := range k.groups {
		g := &k.groups[gi]
		if free[int32(gi)] != (g.count == 0) || len(live[int32(gi)]) != int(g.count) {
			return fmt.Errorf("group %d: %d members, %d recs, free %v", gi, g.count, len(live[int32(gi)]), free[int32(gi)])
		}
		if free[int32(gi)] {
			continue
		}
		if block[g.off] || int(g.off)+int(g.n) > len(k.hashes.h) {
			return fmt.Errorf("group %d: hash block at %d shared, or past the slab", gi, g.off)
		}
		block[g.off] = true
		hashes += 1 << hashClass(int(g.n))
		f := k.fp(g)
		if keys := f.keys(t.sim, nil); g.key != keys[0] || f.oneKey() != (len(keys) == 1) {
			return fmt.Errorf("group %d: key %#x, keys %#x", gi, g.key, keys)
		}
		for _, x := range f.keys(t.sim, nil) {
			posts++
			if !slices.Contains(t.indexed(k, x), int32(gi)) {
				return fmt.Errorf("group %d: not indexed by %#x", gi, x)
			}
		}
	}
	var bad error
	listed := 0
	k.post.each(func(x uint64, groups []int32) {
		s := k.post.slots[k.post.find(x)]
		if s.g < 0 {
			listed++
		}
		if posts -= len(groups); len(groups) == 0 || s.g < 0 && len(groups) < 2 {
			bad = fmt.Errorf("key %#x: %d groups, slot %d", x, len(groups), s.g)
		}
	})
	if bad != nil {
		return bad
	}
	if hashes != k.hashes.live {
		return fmt.Errorf("groups hold %d hashes, the slab counts %d", hashes, k.hashes.live)
	}
	if posts != 0 || listed != len(k.post.lists)-len(k.post.spare) {
		return fmt.Errorf("%d postings too few, or %d keys listed of %d lists and %d spare", -posts, listed, len(k.post.lists), len(k.post.spare))
	}
	return nil
}

func simPolicy(scope Scope, limit int, window time.Duration) Policy {
	return Policy{Name: "sim", Scope: scope, Algorithm: AlgSimilar, Limit: limit, Window: window}
}

// TestSimilarWave: the contract's example, a copy-paste wave from many
// accounts in a busy room: the limit+1-th user's message crosses, once,
// however many allowed messages of other texts come between; the alert
// and Active name the room with the count of users.
func TestSimilarWave(t *testing.T) {
	s := mustSet(t, []Policy{simPolicy(ScopeRoom, 3, 10*time.Second)})
	ad := "Buy cheap gold now at example.com, best prices in town!"
	var alerts []Alert
	for i := range 8 {
		alerts = append(alerts, s.Observe(chat.Event{TS: at(int64(100 * i)), Room: "lobby", User: fmt.Sprint("bot", i), Text: strings.ToUpper(ad)})...)
		alerts = append(alerts, s.Observe(chat.Event{TS: at(int64(100*i + 50)), Room: "lobby", User: "alice", Text: fmt.Sprintf("message number %d of an ordinary chat", i)})...)
	}
	if len(alerts) != 1 || alerts[0].User != "" || alerts[0].Room != "lobby" || alerts[0].Count != 4 || alerts[0].At != ct(300) {
		t.Fatalf("alerts %+v, want one, of the room, count 4, at 300", alerts)
	}
	d := decision(t, s.Check(at(800), "lobby", "carol", "buy cheap GOLD now at example.com - best prices in town", true), "sim")
	if d.Allowed || d.Count != 8 || d.RetryAfterMs != 10_000-800+500 {
		t.Errorf("check: %+v, want denied, count 8, retry until the 3rd newest user's leaves", d)
	}
	if d := decision(t, s.Check(at(800), "lobby", "carol", "hello everyone, how are you today?", true), "sim"); !d.Allowed || d.Count != 0 {
		t.Errorf("another text: %+v", d)
	}
	if a := s.Active(at(800)); len(a) != 1 || a[0].Count != 8 || a[0].Since != ct(300) {
		t.Errorf("Active %+v", a)
	}
	if a := s.Active(at(10_000 + 600)); len(a) != 0 {
		t.Errorf("Active once the wave left the window: %+v", a)
	}
	// Too short, or one word: never alike.
	s = mustSet(t, []Policy{simPolicy(ScopeRoom, 1, 10*time.Second)})
	for i, text := range []string{"hi there yo", "gg", "aaaaaaaaaaaaaaaaaaaa"} {
		s.Observe(chat.Event{TS: at(0), Room: "r", User: fmt.Sprint("u", i), Text: text})
		if d := decision(t, s.Check(at(1), "r", "x", text, true), "sim"); !d.Allowed || d.Count != 0 {
			t.Errorf("%q: %+v", text, d)
		}
	}
}

// TestSimilarUserScope counts one user's earlier alike messages, and a
// check without text is not decided by the policy.
func TestSimilarUserScope(t *testing.T) {
	s := mustSet(t, []Policy{simPolicy(ScopeUser, 2, time.Second)})
	for i := range 2 {
		s.Observe(chat.Event{TS: at(int64(i)), Room: fmt.Sprint("room", i), User: "u", Text: "join my server at discord.gg/xyz now"})
	}
	if d := decision(t, s.Check(at(2), "room9", "u", "JOIN my server at discord.gg/xyz now!", true), "sim"); d.Allowed || d.Count != 2 || d.RetryAfterMs != 1000-2 {
		t.Errorf("%+v", d)
	}
	if d := decision(t, s.Check(at(2), "room9", "v", "join my server at discord.gg/xyz now", true), "sim"); !d.Allowed {
		t.Errorf("another user: %+v", d)
	}
	if res := s.Check(at(2), "room9", "u", "", false); len(res.Decisions) != 0 {
		t.Errorf("without text: %+v", res)
	}
}

// TestSimilarParameters: a bad similarity or min_chars, or a scope similar
// does not take, is refused with the policy and the field named, from a
// Policy and from the policies file; a reload that has one is refused
// whole.
func TestSimilarParameters(t *testing.T) {
	good := simPolicy(ScopeRoom, 3, 10*time.Second)
	for _, c := range []struct {
		set  func(p *Policy)
		want string
	}{
		{func(p *Policy) { p.Similarity = 1.5 }, `policy "sim": similarity: 1.5 is out of range (above 0, at most 1)`},
		{func(p *Policy) { p.Similarity = -0.1 }, `policy "sim": similarity: -0.1 is out of range (above 0, at most 1)`},
		{func(p *Policy) { p.Similarity = math.NaN() }, `policy "sim": similarity: NaN is out of range (above 0, at most 1)`},
		{func(p *Policy) { p.MinChars = -1 }, `policy "sim": min_chars: -1 is below 1`},
		{func(p *Policy) { p.MinChars = maxMinChars + 1 }, `policy "sim": min_chars: 65537 is above 65536 (an event is at most 64 KiB)`},
		{func(p *Policy) { p.Cost = Cost{Mentions: 1} }, `policy "sim": cost: similar counts the users (or messages) that posted alike texts, and weighs nothing`},
		{func(p *Policy) { p.Scope = ScopeUserInRoom }, `policy "sim": scope: similar counts the alike texts of a room's users (room) or of one user (user), got user_in_room`},
		{func(p *Policy) { p.Scope = ScopeGroup }, `policy "sim": scope: similar counts the alike texts of a room's users (room) or of one user (user), got group`},
		{func(p *Policy) { p.Algorithm, p.Similarity = AlgSlidingWindow, 0.9 }, `policy "sim": similarity: only similar has a similarity, not sliding_window`},
		{func(p *Policy) { p.Algorithm, p.MinChars = AlgRepeat, 5 }, `policy "sim": min_chars: only similar has a min_chars, not repeat`},
	} {
		bad := good
		c.set(&bad)
		if _, err := NewSet([]Policy{bad}); err == nil || err.Error() != c.want {
			t.Errorf("NewSet: %v, want %s", err, c.want)
		}
		s := mustSet(t, []Policy{good})
		before := s.state.Load()
		if err := s.Reconfigure([]Policy{DefaultPolicies()[0], bad}); err == nil || err.Error() != c.want {
			t.Errorf("Reconfigure: %v, want %s", err, c.want)
		}
		if s.state.Load() != before {
			t.Errorf("Reconfigure refused %s, but changed the Set", c.want)
		}
	}
	file := func(extra string) string {
		return "policies:\n  - name: wave\n    scope: room\n    algorithm: similar\n    limit: 3\n    window: 10s\n" + extra
	}
	for _, c := range []struct{ yaml, want string }{
		{file("    similarity: 0\n"), `p.yaml:7: policies[0].similarity: 0 is out of range (above 0, at most 1)`},
		{file("    similarity: 1.01\n"), `p.yaml:7: policies[0].similarity: 1.01 is out of range (above 0, at most 1)`},
		{file("    similarity: .nan\n"), `p.yaml:7: policies[0].similarity: .nan is out of range (above 0, at most 1)`},
		{file("    similarity: most\n"), `p.yaml:7: policies[0].similarity: "most" is not a number`},
		{file("    min_chars: 0\n"), `p.yaml:7: policies[0].min_chars: 0 is out of range (1 to 65536)`},
		{file("    min_chars: 2.5\n"), `p.yaml:7: policies[0].min_chars: "2.5" is not an integer`},
		{strings.Replace(file(""), "scope: room", "scope: group", 1), `p.yaml:3: policies[0].scope: similar counts the alike texts of a room's users (room) or of one user (user), got group`},
	} {
		if _, err := ParsePolicies("p.yaml", []byte(c.yaml)); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: %v, want %s", c.yaml, err, c.want)
		}
	}
	ps, err := ParsePolicies("p.yaml", []byte(file("    similarity: 1\n    min_chars: 1\n")))
	if err != nil || ps[0].Similarity != 1 || ps[0].MinChars != 1 {
		t.Errorf("bounds: %+v %v", ps, err)
	}
	ps, err = ParsePolicies("p.yaml", []byte(file("")))
	if err != nil || ps[0].withDefaults().Similarity != DefaultSimilarity || ps[0].withDefaults().MinChars != DefaultMinChars {
		t.Errorf("defaults: %+v %v", ps, err)
	}
}

// TestSimilarMemoryBounded: a flood of unique texts into one room holds
// no more than the window's messages, each as its fingerprint (never its
// text), and gives the memory back once it has left the window while the
// room goes on talking. It measures the live heap, for long texts (cut
// fingerprints) and for short ones.
func TestSimilarMemoryBounded(t *testing.T) {
	const window = 1000 // ms; one message a millisecond
	flood := 20 * window
	if testing.Short() || raceEnabled {
		flood = 4 * window
	}
	for _, c := range []struct {
		words  int
		perMsg int64 // the most bytes a message of the window may hold
	}{{200, 2500}, {8, 300}} {
		s := mustSet(t, []Policy{simPolicy(ScopeRoom, 5, window*time.Millisecond)})
		r := rand.New(rand.NewPCG(3, 4))
		text := func() string {
			var b strings.Builder
			for range c.words {
				fmt.Fprintf(&b, "%x ", r.Uint64())
			}
			return b.String()
		}
		before := heapInUse()
		sent := 0
		for i := range flood {
			text := text()
			sent += len(text)
			s.Observe(chat.Event{TS: at(int64(i)), Room: "lobby", User: fmt.Sprint("bot", i), Text: text})
		}
		k := s.state.Load().stores[0].(*simStore).keys["lobby"]
		if held := len(k.recs) - k.head; held > window {
			t.Fatalf("%d words: %d messages held, more than the window's %d", c.words, held, window)
		}
		during := int64(heapInUse()) - int64(before)
		t.Logf("%d words: %d bytes of text sent, %d held for the window's %d messages (%d a message)", c.words, sent, during, window, during/window)
		if during/window > c.perMsg {
			t.Errorf("%d words: %d bytes held a message of the window, more than %d", c.words, during/window, c.perMsg)
		}
		// The room talks on, a short line every 10 ms, for two windows.
		for i := 0; i < 2*window; i += 10 {
			s.Observe(chat.Event{TS: at(int64(flood + i)), Room: "lobby", User: "alice", Text: fmt.Sprint("just chatting, line ", i%50)})
		}
		after := int64(heapInUse()) - int64(before)
		t.Logf("%d words: after, %d bytes held", c.words, after)
		if after > 32<<10 {
			t.Errorf("%d words: %d bytes still held once the flood left the window, more than 32 KiB", c.words, after)
		}
		if d := decision(t, s.Check(at(int64(flood+2*window)), "lobby", "x", text(), true), "sim"); !d.Allowed || d.Count != 0 {
			t.Errorf("%d words: after the flood: %+v", c.words, d)
		}
	}
}

// FuzzWordPairs: a text's fingerprint is its set of word pairs as the
// contract defines them (oraclePairs), whatever bytes it holds: two
// texts' share from their fingerprints is the exact one when neither is
// cut, and a cut one holds simK hashes.
func FuzzWordPairs(f *testing.F) {
	for _, s := range [][2]string{
		{"Buy cheap GOLD now!", "buy cheap gold now"},
		{"Ünïcode wörds ΣΑΣ σας", "ünïcode WÖRDS σας σας"},
		{"a\xffb c\u200dd 😀 e", "a b c d e"},
		{strings.Repeat("word", 40) + " x " + strings.Repeat("word", 40), strings.Repeat("WORD", 40) + "-x-" + strings.Repeat("word", 40)},
		{"İstanbul ǅemal ﬁne", "i̇stanbul ǆemal ﬁne"},
	} {
		f.Add(s[0], s[1])
	}
	hk := newHashKey()
	f.Fuzz(func(t *testing.T, a, b string) {
		var sa, sb sketch
		hk.pairsOf(a, &sa)
		hk.pairsOf(b, &sb)
		fa, fb := sa.fingerprint(), sb.fingerprint()
		pa, pb := wordPairs(a), wordPairs(b)
		for _, c := range []struct {
			f fingerprint
			p map[string]bool
		}{{fa, pa}, {fb, pb}} {
			if c.f.cut != (len(c.p) > simK) || !c.f.cut && len(c.f.h) != len(c.p) || c.f.cut && len(c.f.h) != simK {
				t.Fatalf("%d hashes (cut %v) for %d pairs", len(c.f.h), c.f.cut, len(c.p))
			}
		}
		if fa.cut || fb.cut {
			return
		}
		both, union := 0, len(pa)
		for p := range pb {
			if pa[p] {
				both++
			} else {
				union++
			}
		}
		if gb, gu := share(fa, fb); gb != both || gu != union {
			t.Fatalf("share %d of %d, want %d of %d", gb, gu, both, union)
		}
	})
}

// TestAlikeExactStopsEarly: alike of two exact fingerprints, which stops
// its merge once the answer is known, says what the whole share says, on
// random sets of every size up to simK drawn from a small range (so that
// they share many hashes) and at similarities that make the share land
// on the boundary.
func TestAlikeExactStopsEarly(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	set := func(n, from int) fingerprint {
		seen := map[uint32]bool{}
		for len(seen) < n {
			seen[uint32(r.IntN(from))] = true
		}
		h := slices.Sorted(maps.Keys(seen))
		return fingerprint{h: h}
	}
	for range 20000 {
		na, nb := 1+r.IntN(simK), 1+r.IntN(simK)
		from := max(na, nb) + r.IntN(2*simK)
		a, b := set(na, from), set(nb, from)
		both, union := share(a, b)
		sims := []int64{1, simScale, int64(r.IntN(simScale)) + 1, int64(both) * simScale / int64(union), int64(both)*simScale/int64(union) + 1}
		for _, sim := range sims {
			sim = min(max(sim, 1), simScale)
			want := int64(both)*simScale >= sim*int64(union)
			if got := alike(a, b, sim); got != want {
				t.Fatalf("%d and %d hashes, %d of %d shared, similarity %d: alike %v, want %v", na, nb, both, union, sim, got, want)
			}
		}
	}
}

// TestOneKey: oneKey says whether keys gives one key, for every size of
// exact fingerprint and for a cut one (always of simK hashes), at low,
// default and full similarity.
func TestOneKey(t *testing.T) {
	for n := 1; n <= simK; n++ {
		h := make([]uint32, n)
		for i := range h {
			h[i] = uint32(3 * i)
		}
		for _, cut := range []bool{false, n == simK} {
			f := fingerprint{h: h, cut: cut}
			for _, sim := range []int64{1, 500_000, DefaultSimilarity * simScale, simScale} {
				if keys := f.keys(sim, nil); f.oneKey() != (len(keys) == 1) {
					t.Fatalf("%d hashes, cut %v, similarity %d: oneKey %v, %d keys", n, cut, sim, f.oneKey(), len(keys))
				}
			}
		}
	}
}

// TestRankSort: rankSort sorts as slices.Sort does, for every count up to
// smallSort, with many equal values and with the extremes of uint32.
func TestRankSort(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for n := range smallSort + 1 {
		for _, span := range []uint64{1, 3, uint64(n) + 1, 1 << 32} {
			var c collector
			for i := range n {
				c.v[i] = uint32(r.Uint64N(span))
				if span == 1<<32 && i%5 == 0 {
					c.v[i] = [2]uint32{0, math.MaxUint32}[i%2]
				}
			}
			want := slices.Clone(c.v[:n])
			slices.Sort(want)
			c.n = n
			c.rankSort()
			if !slices.Equal(c.v[:n], want) {
				t.Fatalf("%d values below %d: %v, want %v", n, span, c.v[:n], want)
			}
		}
	}
}

// TestSimilarObserveBatchIsObserveInALoop: ObserveBatch, which reuses one
// sketch for a chunk's messages, gives the alerts, checks and state of
// Observe in a loop, on texts that are often alike, some long enough to
// be cut, late messages and a key cap.
func TestSimilarObserveBatchIsObserveInALoop(t *testing.T) {
	ps := []Policy{
		{Name: "room", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 3, Window: 2 * time.Second},
		{Name: "user", Scope: ScopeUser, Algorithm: AlgSimilar, Limit: 2, Window: time.Second, Similarity: 0.6, MinChars: 5},
	}
	one, batch := mustSet(t, ps, WithMaxKeys(6)), mustSet(t, ps, WithMaxKeys(6))
	// One hash key for both: a cut text's sample, and so whether it is
	// found alike, depends on it.
	batch.state.Store(batch.emptyState(batch.state.Load().rules, one.state.Load().hk))
	r := rand.New(rand.NewPCG(9, 10))
	words := strings.Fields("free gold now click here win big prize today")
	text := func() string {
		n := []int{0, 1, 3, 6, 12, 200}[r.IntN(6)]
		var b strings.Builder
		for range n {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	now := int64(0)
	var want, got []Alert
	for range 150 {
		var evs []chat.Event
		for range r.IntN(3 * batchChunk) {
			now += r.Int64N(30)
			evs = append(evs, chat.Event{TS: at(now - r.Int64N(200)), Room: fmt.Sprint("r", r.IntN(8)), User: fmt.Sprint("u", r.IntN(8)), Text: text()})
		}
		for _, e := range evs {
			want = append(want, one.Observe(e)...)
		}
		batch.ObserveBatch(evs, func(_ int, a Alert) { got = append(got, a) }, nil)
		if !slices.EqualFunc(got, want, func(a, b Alert) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
			t.Fatalf("alerts\n got %+v\nwant %+v", got, want)
		}
		for _, u := range []string{"u0", "u1"} {
			txt := text()
			if x, y := batch.Check(at(now), "r1", u, txt, true), one.Check(at(now), "r1", u, txt, true); fmt.Sprint(x) != fmt.Sprint(y) {
				t.Fatalf("check\n got %+v\nwant %+v", x, y)
			}
		}
		for i := range ps {
			if err := batch.state.Load().stores[i].(*simStore).verify(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("no alerts: the test tests nothing")
	}
	if x, y := fmt.Sprint(batch.Active(at(now))), fmt.Sprint(one.Active(at(now))); x != y {
		t.Errorf("active\n got %s\nwant %s", x, y)
	}
	if x, y := batch.Stats(), one.Stats(); fmt.Sprint(x) != fmt.Sprint(y) {
		t.Errorf("stats\n got %+v\nwant %+v", x, y)
	}
}
