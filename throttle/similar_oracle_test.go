package throttle

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/chatpulse/chatpulse/chat"
)

// The brute-force reference of similar: every message kept, every share
// computed from the texts' word pairs as the contract defines them.

// pairsMemo keeps oraclePairs' answers: a trace compares each text
// with many. Each trace clears it.
var pairsMemo sync.Map

// oraclePairs is the set of word pairs of text, by the contract's words:
// runs of letters and digits, lower-cased.
func oraclePairs(text string) map[string]bool {
	if p, ok := pairsMemo.Load(text); ok {
		return p.(map[string]bool)
	}
	p := wordPairs(text)
	pairsMemo.Store(text, p)
	return p
}

func wordPairs(text string) map[string]bool {
	words := strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	out := map[string]bool{}
	for i := 1; i < len(words); i++ {
		out[strings.Map(unicode.ToLower, words[i-1])+"\x00"+strings.Map(unicode.ToLower, words[i])] = true
	}
	return out
}

// oracleShare is the share of two texts' pairs, as both and union.
func oracleShare(a, b string) (both, union int) {
	pa, pb := oraclePairs(a), oraclePairs(b)
	for p := range pa {
		if pb[p] {
			both++
		}
	}
	return both, len(pa) + len(pb) - both
}

// atLeast reports whether a and b share at least frac (millionths) of
// their pairs' union.
func atLeast(a, b string, frac int64) bool {
	both, union := oracleShare(a, b)
	return union > 0 && int64(both)*simScale >= frac*int64(union)
}

type simMsg struct {
	at         int64
	user, text string
}

// simOracle is one key of a similar policy: every message it recorded,
// and its alert mark. alike is the relation it decides by: the exact
// share at the policy's similarity, or the method's (methodAlike).
type simOracle struct {
	p      Policy // defaults filled in
	alike  func(a, b string) bool
	msgs   []simMsg
	newest int64
	since  int64
	wave   string
}

func newSimOracle(p Policy, alike func(a, b string) bool) *simOracle {
	return &simOracle{p: p, alike: alike, newest: chat.Never, since: chat.Never}
}

// has reports whether text can be alike to any: long enough, with a pair.
func (o *simOracle) has(text string) bool {
	return utf8.RuneCountInString(text) >= o.p.MinChars && len(oraclePairs(text)) > 0
}

// found is what the verdict for text at now counts: the alike messages
// of the window, each user once at its newest for scope room.
func (o *simOracle) found(text string, now int64, alike func(a, b string) bool) []simMsg {
	if !o.has(text) {
		return nil
	}
	at, w := max(now, o.newest), o.p.Window.Milliseconds()
	newest := map[string]int64{}
	var out []simMsg
	for _, m := range o.msgs {
		if m.at <= at-w || !alike(text, m.text) {
			continue
		}
		if o.p.Scope == ScopeUser {
			out = append(out, m)
		} else if t, ok := newest[m.user]; !ok || m.at > t {
			newest[m.user] = m.at
		}
	}
	for u, t := range newest {
		out = append(out, simMsg{at: t, user: u})
	}
	return out
}

func (o *simOracle) verdict(text string, now int64) Verdict {
	found := o.found(text, now, o.alike)
	n, l := int64(len(found)), int64(o.p.Limit)
	if n < l {
		return allowed(n, l)
	}
	slices.SortFunc(found, func(a, b simMsg) int { return cmp.Compare(b.at, a.at) })
	return denied(n, l, found[l-1].at+o.p.Window.Milliseconds()-now)
}

// hit records a message and returns the count of its crossing, or -1.
func (o *simOracle) hit(m simMsg) int64 {
	if o.since != chat.Never && o.verdict(o.wave, m.at).Allowed {
		o.since = chat.Never
	}
	v := o.verdict(m.text, m.at)
	at := max(m.at, o.newest)
	if o.has(m.text) && m.at > at-o.p.Window.Milliseconds() {
		o.msgs = append(o.msgs, m)
	}
	o.newest = at
	if v.Allowed || o.since != chat.Never || o.p.Mode == ModeShadow {
		return -1
	}
	o.since, o.wave = m.at, m.text
	return o.verdict(m.text, m.at).Count
}

// methodAlike is the relation the Set decides by, brute force: two
// fingerprints alike at the similarity, identical or sharing an index key.
func methodAlike(hk *hashKey, sim int64) func(a, b string) bool {
	memo := map[string]fingerprint{}
	fp := func(text string) fingerprint {
		f, ok := memo[text]
		if !ok {
			var s sketch
			hk.pairsOf(text, &s)
			f = s.fingerprint()
			f.h = slices.Clone(f.h)
			memo[text] = f
		}
		return f
	}
	return func(a, b string) bool {
		fa, fb := fp(a), fp(b)
		if !alike(fa, fb, sim) {
			return false
		}
		if slices.Equal(fa.h, fb.h) && fa.cut == fb.cut {
			return true
		}
		kb := fb.keys(sim, nil)
		for _, x := range fa.keys(sim, nil) {
			if slices.Contains(kb, x) {
				return true
			}
		}
		return false
	}
}

// A textGen makes the texts of a trace: families of texts, each a base of
// words written in many ways (case, separators: spaces, punctuation, emoji,
// symbols, URLs), and variants that change its last word. clear: only
// variants whose share with the base is 0.95 or more (bases of at least
// 40 words), so every two texts share 0.95 or more, or under 0.5;
// otherwise variants change any word, with shares of every size.
type textGen struct {
	r     *rand.Rand
	clear bool
	bases [][]string
	texts []string
	most  int // the most bases (0: no most)
}

var (
	scripts = [][2]rune{{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'а', 'я'}, {'α', 'ω'}, {'一', '龥'}, {'ا', 'ي'}}
	seps    = []string{" ", " ", " ", "  ", ", ", "! ", " 😀 ", "\t", " ™ ", "—", "\n", ". ", " © ", "🇫🇷", " ☃ ", "\u200d", "/", " @", "#", "\xff"}
)

// word is a word, or now and then a URL (with a scheme or without),
// which is a few.
func (g *textGen) word() string {
	if g.r.IntN(20) == 0 {
		return []string{"https://", "http://", "www.", ""}[g.r.IntN(4)] + g.plain() + ".com/x"
	}
	return g.plain()
}

func (g *textGen) plain() string {
	var b strings.Builder
	s := scripts[g.r.IntN(len(scripts))]
	for range 1 + g.r.IntN(7) {
		b.WriteRune(s[0] + g.r.Int32N(s[1]-s[0]+1))
	}
	return b.String()
}

// write joins words with random separators and random case.
func (g *textGen) write(words []string) string {
	var b strings.Builder
	if g.r.IntN(4) == 0 {
		b.WriteString(seps[g.r.IntN(len(seps))])
	}
	for i, w := range words {
		if i > 0 {
			b.WriteString(seps[g.r.IntN(len(seps))])
		}
		if u := strings.ToUpper(w); g.r.IntN(3) == 0 && strings.ToLower(u) == strings.ToLower(w) {
			w = u // not ς, whose upper case is Σ, lower-cased σ
		}
		b.WriteString(w)
	}
	return b.String()
}

func (g *textGen) next() string {
	switch g.r.IntN(12) {
	case 0:
		return []string{"", "gg", "ok ok", "hi there", "lol!!!!!!!!!!!!!", "😀😀😀😀😀😀😀😀😀😀😀😀", "a b c d e f g"}[g.r.IntN(7)]
	case 1:
		if len(g.texts) > 0 { // the same text again
			return g.texts[g.r.IntN(len(g.texts))]
		}
	}
	if len(g.bases) == 0 || g.r.IntN(5) == 0 && (g.most == 0 || len(g.bases) < g.most) {
		n := []int{2, 3, 5, 8, 12, 20, 40, 45, 60, 150, 200}[g.r.IntN(11)]
		base := make([]string, n)
		for i := range base {
			base[i] = g.word()
		}
		base[n-1] = g.plain() // the one a variant changes
		g.bases = append(g.bases, base)
	}
	base := slices.Clone(g.bases[g.r.IntN(len(g.bases))])
	switch {
	case g.clear && len(base) >= 40 && g.r.IntN(2) == 0:
		base[len(base)-1] = g.plain()
	case !g.clear:
		q := []int{0, 0, 3, 6, 10, 20, 40}[g.r.IntN(7)]
		for i := range base {
			if g.r.IntN(100) < q {
				base[i] = g.word()
			}
		}
	}
	t := g.write(base)
	g.texts = append(g.texts, t)
	return t
}

// simTrace runs a random trace of messages, checks, sweeps and Active
// calls against a Set of one similar policy and the references of its
// keys (with relation alike), and calls also with each decision and the
// texts of the window, for more checks.
func simTrace(t *testing.T, seed uint64, clear bool, method bool) {
	pairsMemo.Clear()
	defer pairsMemo.Clear()
	r := rand.New(rand.NewPCG(seed, 32))
	p := Policy{Name: "sim", Scope: []Scope{ScopeRoom, ScopeUser}[r.IntN(2)], Algorithm: AlgSimilar, Limit: 1 + r.IntN(4),
		Window: ms([]int64{500, 1000, 2000}[r.IntN(3)]), MinChars: []int{0, 1, 12, 30}[r.IntN(4)]}
	if method {
		p.Similarity = []float64{0, 0.5, 0.6, 0.8, 0.9, 1}[r.IntN(6)]
	} else {
		p.Similarity = []float64{0, 0.6, 0.7, 0.8}[r.IntN(4)]
	}
	if r.IntN(5) == 0 {
		p.Mode = ModeShadow
	}
	p = p.withDefaults()
	s := mustSet(t, []Policy{p})
	sim := millionths(p.Similarity)
	rel := func(a, b string) bool { return atLeast(a, b, sim) }
	if method {
		rel = methodAlike(s.state.Load().hk, sim)
	}
	keys := map[string]*simOracle{}
	key := func(room, user string) *simOracle {
		name := room
		if p.Scope == ScopeUser {
			name = user
		}
		if keys[name] == nil {
			keys[name] = newSimOracle(p, rel)
		}
		return keys[name]
	}
	g := &textGen{r: r, clear: clear}
	w := p.Window.Milliseconds()
	clock := int64(0)
	name := fmt.Sprintf("seed %d %+v", seed, p)
	// bounds checks a count against the exact shares: at least the users
	// (messages) of texts sharing 0.95, at most those of 0.5. A long
	// text's share is estimated (pairs.go), and each Set draws its hash
	// key anew: a similarity near either bound may err across it, so each
	// bound is checked only with a similarity far enough from it that an
	// error is out of reach (0.8, the default: over six standard errors).
	bounds := func(o *simOracle, text string, now, count int64, what string) {
		t.Helper()
		lo, hi := int64(0), int64(math.MaxInt64)
		if p.Similarity <= 0.8 {
			lo = int64(len(o.found(text, now, func(a, b string) bool { return atLeast(a, b, surely) })))
		}
		if p.Similarity >= 0.8 {
			hi = int64(len(o.found(text, now, func(a, b string) bool { return atLeast(a, b, 500_000) })))
		}
		if count < lo || count > hi {
			t.Fatalf("%s: %s %q: count %d, not within %d (shares of 0.95 and up) and %d (0.5 and up)", name, what, text, count, lo, hi)
		}
	}
	// A Set forgets a key at rest (its window empty at the newest instant
	// it was handed, seen): a message or check of the key at an earlier
	// instant than the key's next window would then find it empty, where
	// the reference would not. So none comes that early.
	seen := int64(chat.Never)
	floor := func(o *simOracle, at int64) int64 {
		if o.newest != chat.Never && o.newest <= seen-w {
			return max(at, o.newest+w)
		}
		return at
	}
	for step := range 600 {
		clock += r.Int64N(w / 4)
		room, user := fmt.Sprint("r", r.IntN(2)), fmt.Sprint("u", r.IntN(6))
		o := key(room, user)
		switch c := r.IntN(20); {
		case c < 12: // a message, maybe late
			at := clock
			if r.IntN(6) == 0 {
				at -= r.Int64N(w + 200)
			}
			at = floor(o, at)
			seen = max(seen, at)
			text := g.next()
			e := chat.Event{TS: at, Room: room, User: user, Text: text, ID: fmt.Sprint("e", step)}
			alerts := s.Observe(e)
			bounds(o, text, at, o.verdict(text, at).Count, "message")
			want := o.hit(simMsg{at: at, user: user, text: text})
			switch {
			case want < 0 && len(alerts) > 0:
				t.Fatalf("%s step %d: message %q at %d alerts %+v, want none", name, step, text, at, alerts)
			case want >= 0 && (len(alerts) != 1 || alerts[0].Count != want || alerts[0].At != chat.Time(at)):
				t.Fatalf("%s step %d: message %q at %d alerts %+v, want one of count %d", name, step, text, at, alerts, want)
			}
		case c < 18: // a check
			now := floor(o, clock-r.Int64N(w/2))
			text := g.next()
			res := s.Check(now, room, user, text, true)
			d := decision(t, res, "sim")
			v := o.verdict(text, now)
			if d.Allowed != v.Allowed || d.Count != v.Count || d.RetryAfterMs != v.RetryAfter.Milliseconds() {
				t.Fatalf("%s step %d: check %q at %d: %+v, want %+v", name, step, text, now, d, v)
			}
			bounds(o, text, now, d.Count, "check")
		case c < 19:
			s.Sweep(clock - w - 300) // no later message is that late
			seen = max(seen, clock-w-300)
		default:
			var want []Active
			for name, o := range keys {
				if o.since == chat.Never {
					continue
				}
				if v := o.verdict(o.wave, clock); !v.Allowed {
					room, user := splitKey(name, p.Scope)
					want = append(want, Active{Policy: "sim", Room: room, User: user, Count: v.Count, Limit: v.Limit, Since: chat.Time(o.since)})
				}
			}
			slices.SortFunc(want, func(a, b Active) int { return cmp.Or(strings.Compare(a.Room, b.Room), strings.Compare(a.User, b.User)) })
			if got := s.Active(clock); fmt.Sprint(got) != fmt.Sprint(want) && len(got)+len(want) > 0 {
				t.Fatalf("%s step %d: Active at %d\n got %+v\nwant %+v", name, step, clock, got, want)
			}
		}
		if err := s.state.Load().stores[0].(*simStore).verify(); err != nil {
			t.Fatalf("%s step %d: %v", name, step, err)
		}
	}
	// Every two texts of a clear trace share 0.95 or more, or under 0.5
	// (checked on a few traces: it is the generator's, not the Set's).
	if clear && seed < 5 {
		for i, a := range g.texts {
			for _, b := range g.texts[:i] {
				both, union := oracleShare(a, b)
				if union > 0 && both*20 < 19*union && both*2 >= union {
					t.Fatalf("%s: texts %q and %q share %d of %d", name, a, b, both, union)
				}
			}
		}
	}
}

// TestSimilarAgainstOracle: on random traces whose texts share 0.95 or
// more, or under 0.5 (late messages, expiry, ties, multi-byte letters,
// emoji and symbols, invalid bytes, long texts that are cut), every
// alert, check and Active is the reference's, by the exact shares.
func TestSimilarAgainstOracle(t *testing.T) {
	traces := 60
	if testing.Short() || raceEnabled {
		traces = 20
	}
	for seed := range traces {
		simTrace(t, uint64(seed), true, false)
	}
}

// TestSimilarMethodAgainstOracle: on random traces whose texts share
// anything, every answer is that of the reference deciding by the
// documented method (alike fingerprints, identical or sharing a key), and
// every count lies between the counts of texts sharing 0.95 or more and
// 0.5 or more.
func TestSimilarMethodAgainstOracle(t *testing.T) {
	traces := 60
	if testing.Short() || raceEnabled {
		traces = 20
	}
	for seed := range traces {
		simTrace(t, uint64(seed)+1000, false, true)
	}
}
