package throttle

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

func tm(ms int64) time.Time { return time.UnixMilli(ms) }

// The background example: TokenBucket(capacity 3, rate 1/s) asked at
// 0, 0, 0, 0, 1, 1.5, 3 seconds answers T, T, T, F, T, F, T. GCRA with the
// same numbers must agree.
func TestTokenBucketBackgroundExample(t *testing.T) {
	at := []int64{0, 0, 0, 0, 1000, 1500, 3000}
	want := []bool{true, true, true, false, true, false, true}
	for _, l := range []Limiter{NewTokenBucket(1, time.Second, 3), NewGCRA(1, time.Second, 3)} {
		for i, a := range at {
			if got := l.Hit(tm(a)).Allowed; got != want[i] {
				t.Errorf("%T: hit %d at %dms: allowed %v, want %v", l, i, a, got, want[i])
			}
		}
	}
	// After the hits at 0,0,0: no token; one whole token takes 1s.
	b := NewTokenBucket(1, time.Second, 3)
	for range 3 {
		b.Hit(tm(0))
	}
	if v := b.Decide(tm(400)); v.Allowed || v.Count != 3 || v.Remaining != 0 || v.RetryAfter != 600*time.Millisecond || v.Limit != 3 {
		t.Errorf("at 400ms: %+v, want denied, count 3, retry 600ms", v)
	}
	if v := b.Decide(tm(2500)); !v.Allowed || v.Count != 1 || v.Remaining != 2 {
		t.Errorf("at 2500ms: %+v, want allowed, count 1, remaining 2", v)
	}
}

// The window boundary [t-W+1, t], in buckets: with a 5s window at 1s, hits
// at seconds 1, 2, 2 are all counted at 4 and 5, and the one at 1 leaves at
// 6 (the rolling-counter example of the background).
func TestSlidingWindowBoundary(t *testing.T) {
	w := NewSlidingWindow(10, 5*time.Second, time.Second)
	for _, s := range []int64{1000, 2000, 2999} {
		w.Hit(tm(s))
	}
	for _, c := range []struct {
		at    int64
		count int64
	}{{4000, 3}, {5999, 3}, {6000, 2}, {6999, 2}, {7000, 0}, {12000, 0}} {
		if v := w.Decide(tm(c.at)); v.Count != c.count {
			t.Errorf("count at %dms = %d, want %d", c.at, v.Count, c.count)
		}
	}
	// limit 3: denied until the bucket of second 1 leaves, at 6s exactly.
	w = NewSlidingWindow(3, 5*time.Second, time.Second)
	for _, s := range []int64{1000, 2000, 2999} {
		w.Hit(tm(s))
	}
	if v := w.Decide(tm(5500)); v.Allowed || v.RetryAfter != 500*time.Millisecond {
		t.Errorf("at 5.5s: %+v, want denied, retry 500ms", v)
	}
	if v := w.Decide(tm(6000)); !v.Allowed || v.Count != 2 {
		t.Errorf("at 6s: %+v, want allowed, count 2", v)
	}
	// A gap longer than the window resets in one step; a stale bucket
	// reused 5 buckets later starts from zero.
	w.Hit(tm(7000))
	w.Hit(tm(1_000_000))
	if v := w.Decide(tm(1_000_000)); v.Count != 1 {
		t.Errorf("after a long gap: count %d, want 1", v.Count)
	}
	// Every hit counts: 12 hits with limit 3.
	for range 11 {
		w.Hit(tm(1_000_500))
	}
	if v := w.Decide(tm(1_000_999)); v.Count != 12 || v.Remaining != 0 || v.Allowed {
		t.Errorf("12 hits: %+v", v)
	}
}

// The sliding window counter, worked by hand: W = 10s, limit 10. Window 0
// gets 8 hits, window 1 gets 3. At 12.5s, e = 2.5s: estimate =
// 8·(10-2.5)/10 + 3 = 9, allowed, count 9. One more hit makes curr 4:
// estimate 10 at 12.5s, denied. It falls below 10 when 8·(10000-e)/10000 + 4
// < 10, i.e. e > 2500ms: at 12.501s. At 20s: prev 4, curr 0, estimate 4.
func TestSlidingWindowCounterByHand(t *testing.T) {
	c := NewSlidingWindowCounter(10, 10*time.Second)
	for i := range 8 {
		c.Hit(tm(int64(i) * 1000))
	}
	for i := range 3 {
		c.Hit(tm(10_000 + int64(i)*100))
	}
	if v := c.Decide(tm(12_500)); !v.Allowed || v.Count != 9 || v.Remaining != 1 {
		t.Errorf("at 12.5s: %+v, want allowed, count 9, remaining 1", v)
	}
	c.Hit(tm(12_500))
	if v := c.Decide(tm(12_500)); v.Allowed || v.Count != 10 || v.RetryAfter != time.Millisecond {
		t.Errorf("at 12.5s after a hit: %+v, want denied, count 10, retry 1ms", v)
	}
	if v := c.Decide(tm(12_501)); !v.Allowed || v.Count != 9 {
		t.Errorf("at 12.501s: %+v, want allowed, count 9", v)
	}
	if v := c.Decide(tm(20_000)); v.Count != 4 {
		t.Errorf("at 20s: %+v, want count 4", v)
	}
	// curr >= limit: no instant of this window helps. 12 hits in window 3
	// (30s..40s): in window 4, 12·(10000-e)/10000 < 10 from e = 1667ms.
	for range 12 {
		c.Hit(tm(30_000))
	}
	if v := c.Decide(tm(35_000)); v.Allowed || v.Count != 12 || v.RetryAfter != 6667*time.Millisecond {
		t.Errorf("at 35s: %+v, want denied, count 12, retry 6667ms", v)
	}
}

func TestFixedWindowByHand(t *testing.T) {
	f := NewFixedWindow(2, time.Minute)
	f.Hit(tm(59_000))
	f.Hit(tm(59_500))
	if v := f.Decide(tm(59_999)); v.Allowed || v.RetryAfter != time.Millisecond {
		t.Errorf("at 59.999s: %+v", v)
	}
	// The boundary burst fixed windows allow: 2 more at once in the next minute.
	if v := f.Hit(tm(60_000)); !v.Allowed || v.Count != 0 {
		t.Errorf("at 60s: %+v", v)
	}
}

func TestRepeatByHand(t *testing.T) {
	r := NewRepeat(1, 30*time.Second)
	if v := r.Hit(tm(1000)); !v.Allowed {
		t.Errorf("first: %+v", v)
	}
	if v := r.Decide(tm(30_999)); v.Allowed || v.Count != 1 || v.RetryAfter != time.Millisecond {
		t.Errorf("at 30.999s: %+v, want denied, retry 1ms", v)
	}
	if v := r.Decide(tm(31_000)); !v.Allowed || v.Count != 0 {
		t.Errorf("at 31s: %+v, want allowed", v)
	}
}

// --- Brute-force references: keep every hit, decide by scanning. ---

// oracle decides from the list of every hit. Reads are taken at the
// newest hit when earlier (the package's rule); each oracle applies it in
// its own terms. A hit has a cost (1 for a plain hit; docs/contract.md
// section 15): c hits' worth at once. One that costs 0 is no hit: it is
// always allowed and records nothing.
type oracle interface {
	hit(at, cost int64)
	// decide returns allowed, count and remaining at now, for a hit of
	// that cost.
	decide(now, cost int64) (bool, int64, int64)
}

type hitAt struct{ at, cost int64 }

type hitList struct {
	hits   []hitAt
	newest int64
}

func (h *hitList) add(at, cost int64) {
	if cost == 0 {
		return
	}
	if len(h.hits) == 0 || at > h.newest {
		h.newest = at
	}
	h.hits = append(h.hits, hitAt{at, cost})
}

// fits is the rule of the windows: a hit is allowed iff it costs nothing
// or the count plus its cost is at most the limit.
func fits(count, cost, limit int64) bool { return cost == 0 || count+cost <= limit }

// fdiv is floor(a/b) for b > 0, written differently from floorDiv.
func fdiv(a, b int64) int64 { return (a - ((a%b)+b)%b) / b }

type slidingOracle struct {
	hitList
	limit, n, res int64
}

func (o *slidingOracle) hit(at, cost int64) { o.add(at, cost) }
func (o *slidingOracle) decide(now, cost int64) (bool, int64, int64) {
	b := fdiv(now, o.res)
	if len(o.hits) > 0 {
		b = max(b, fdiv(o.newest, o.res))
	}
	count := int64(0)
	for _, h := range o.hits {
		if hb := fdiv(h.at, o.res); b-o.n+1 <= hb && hb <= b {
			count += h.cost
		}
	}
	return fits(count, cost, o.limit), count, max(0, o.limit-count)
}

type counterOracle struct {
	hitList
	limit, w int64
}

func (o *counterOracle) hit(at, cost int64) { o.add(at, cost) }
func (o *counterOracle) decide(now, cost int64) (bool, int64, int64) {
	win, e := fdiv(now, o.w), now-fdiv(now, o.w)*o.w
	if len(o.hits) > 0 && win < fdiv(o.newest, o.w) {
		win, e = fdiv(o.newest, o.w), 0
	}
	var prev, curr int64
	for _, h := range o.hits {
		switch fdiv(h.at, o.w) {
		case win:
			curr += h.cost
		case win - 1:
			prev += h.cost
		}
	}
	est := new(big.Rat).SetFrac64(prev*(o.w-e), o.w)
	est.Add(est, new(big.Rat).SetInt64(curr))
	count := new(big.Int).Div(est.Num(), est.Denom()).Int64()
	return fits(count, cost, o.limit), count, max(0, o.limit-count)
}

type fixedOracle struct {
	hitList
	limit, w int64
}

func (o *fixedOracle) hit(at, cost int64) { o.add(at, cost) }
func (o *fixedOracle) decide(now, cost int64) (bool, int64, int64) {
	win := fdiv(now, o.w)
	if len(o.hits) > 0 {
		win = max(win, fdiv(o.newest, o.w))
	}
	count := int64(0)
	for _, h := range o.hits {
		if fdiv(h.at, o.w) == win {
			count += h.cost
		}
	}
	return fits(count, cost, o.limit), count, max(0, o.limit-count)
}

// bucketOracle replays the token bucket of the background text with exact
// rational tokens: refill limit/W per ms, capped at burst, a hit of cost c
// that finds c whole tokens takes them.
type bucketOracle struct {
	limit, burst, w int64
	tokens          *big.Rat
	last            int64
	started         bool
}

func (o *bucketOracle) at(t int64) (*big.Rat, int64) {
	if !o.started {
		return big.NewRat(o.burst, 1), t
	}
	t = max(t, o.last)
	tok := new(big.Rat).Add(o.tokens, big.NewRat((t-o.last)*o.limit, o.w))
	if tok.Cmp(big.NewRat(o.burst, 1)) > 0 {
		tok = big.NewRat(o.burst, 1)
	}
	return tok, t
}

func (o *bucketOracle) hit(at, cost int64) {
	if cost == 0 {
		return
	}
	tok, t := o.at(at)
	if tok.Cmp(big.NewRat(cost, 1)) >= 0 {
		tok.Sub(tok, big.NewRat(cost, 1))
	}
	o.tokens, o.last, o.started = tok, t, true
}

func (o *bucketOracle) decide(now, cost int64) (bool, int64, int64) {
	tok, _ := o.at(now)
	whole := new(big.Int).Div(tok.Num(), tok.Denom()).Int64()
	return whole >= cost, o.burst - whole, whole
}

// gcraOracle is GCRA with a rational TAT, decided at each instant as
// given: a hit of cost c is allowed iff it moves the TAT no further than
// burst intervals past now.
type gcraOracle struct {
	limit, burst, w int64
	tat             *big.Rat
}

func (o *gcraOracle) used(now int64) *big.Rat {
	t := big.NewRat(now, 1)
	if o.tat == nil || o.tat.Cmp(t) < 0 {
		return new(big.Rat)
	}
	return new(big.Rat).Sub(o.tat, t)
}

// fits reports whether a hit of that cost fits at now.
func (o *gcraOracle) fits(now, cost int64) bool {
	after := new(big.Rat).Add(o.used(now), big.NewRat(cost*o.w, o.limit))
	return cost == 0 || after.Cmp(big.NewRat(o.burst*o.w, o.limit)) <= 0
}

func (o *gcraOracle) hit(at, cost int64) {
	if cost > 0 && o.fits(at, cost) {
		o.tat = new(big.Rat).Add(big.NewRat(at, 1), o.used(at))
		o.tat.Add(o.tat, big.NewRat(cost*o.w, o.limit))
	}
}

func (o *gcraOracle) decide(now, cost int64) (bool, int64, int64) {
	q := new(big.Rat).Quo(o.used(now), big.NewRat(o.w, o.limit)) // tokens in use
	count := new(big.Int).Div(q.Num(), q.Denom()).Int64()
	if !q.IsInt() {
		count++
	}
	count = min(count, o.burst)
	return o.fits(now, cost), count, o.burst - count
}

type repeatOracle struct {
	hitList
	limit, w int64
}

func (o *repeatOracle) hit(at, cost int64) { o.add(at, cost) }
func (o *repeatOracle) decide(now, cost int64) (bool, int64, int64) {
	if len(o.hits) > 0 {
		now = max(now, o.newest)
	}
	held := int64(0)
	for _, h := range o.hits {
		if now-o.w < h.at && h.at <= now {
			held += h.cost
		}
	}
	// Repeat keeps only the newest occurrences, those that reach the
	// limit: its count stops there.
	count := min(held, o.limit)
	return fits(held, cost, o.limit), count, o.limit - count
}

// algCase builds a fresh limiter and its oracle from random parameters.
type algCase struct {
	name string
	make func(r *rand.Rand) (Limiter, oracle, string)
	// late: how far back an out-of-order hit may go, in windows.
	inOrder bool
}

func windowMs(r *rand.Rand) int64 {
	return []int64{1, 7, 100, 1000, 2500, 10_000}[r.IntN(6)]
}

var algCases = []algCase{
	{name: "sliding_window", make: func(r *rand.Rand) (Limiter, oracle, string) {
		res := []int64{1, 10, 250, 1000}[r.IntN(4)]
		n := 1 + r.Int64N(12)
		limit := 1 + r.Int64N(6)
		return NewSlidingWindow(int(limit), ms(n*res), ms(res)), &slidingOracle{limit: limit, n: n, res: res},
			fmt.Sprintf("limit %d, %d buckets of %dms", limit, n, res)
	}},
	{name: "sliding_window_counter", make: func(r *rand.Rand) (Limiter, oracle, string) {
		w, limit := windowMs(r), 1+r.Int64N(6)
		return NewSlidingWindowCounter(int(limit), ms(w)), &counterOracle{limit: limit, w: w}, fmt.Sprintf("limit %d, window %dms", limit, w)
	}},
	{name: "fixed_window", make: func(r *rand.Rand) (Limiter, oracle, string) {
		w, limit := windowMs(r), 1+r.Int64N(6)
		return NewFixedWindow(int(limit), ms(w)), &fixedOracle{limit: limit, w: w}, fmt.Sprintf("limit %d, window %dms", limit, w)
	}},
	{name: "token_bucket", make: func(r *rand.Rand) (Limiter, oracle, string) {
		w, limit, burst := windowMs(r), 1+r.Int64N(6), 1+r.Int64N(6)
		return NewTokenBucket(int(limit), ms(w), int(burst)), &bucketOracle{limit: limit, burst: burst, w: w},
			fmt.Sprintf("limit %d, burst %d, window %dms", limit, burst, w)
	}},
	{name: "gcra", make: func(r *rand.Rand) (Limiter, oracle, string) {
		w, limit, burst := windowMs(r), 1+r.Int64N(6), 1+r.Int64N(6)
		return NewGCRA(int(limit), ms(w), int(burst)), &gcraOracle{limit: limit, burst: burst, w: w},
			fmt.Sprintf("limit %d, burst %d, window %dms", limit, burst, w)
	}},
	// In order, GCRA must give exactly the token bucket's answers.
	{name: "gcra=token_bucket", inOrder: true, make: func(r *rand.Rand) (Limiter, oracle, string) {
		w, limit, burst := windowMs(r), 1+r.Int64N(6), 1+r.Int64N(6)
		return NewGCRA(int(limit), ms(w), int(burst)), &bucketOracle{limit: limit, burst: burst, w: w},
			fmt.Sprintf("limit %d, burst %d, window %dms", limit, burst, w)
	}},
	{name: "repeat", make: func(r *rand.Rand) (Limiter, oracle, string) {
		w, limit := windowMs(r), 1+r.Int64N(4)
		return NewRepeat(int(limit), ms(w)), &repeatOracle{limit: limit, w: w}, fmt.Sprintf("limit %d, window %dms", limit, w)
	}},
}

// TestAgainstOracle runs every algorithm and its brute-force reference over
// random traces (bursts at one instant, steps onto exact boundaries, gaps
// longer than the window, out-of-order hits, reads in the past and far
// future) and compares every answer: allowed, count, remaining, and
// retry-after. Allowed is monotone in time while no hit arrives, so
// retry-after is exact iff the reference allows at now+retry and denies one
// millisecond earlier. Each trace runs twice: with plain hits (Hit,
// Decide), and with hits of random costs (HitN, DecideN; section 15 of
// docs/contract.md), free ones and ones over the limit alone among them.
func TestAgainstOracle(t *testing.T) {
	traces := 300
	if testing.Short() || raceEnabled {
		traces = 120
	}
	for _, ac := range algCases {
		for _, costs := range []bool{false, true} {
			name := ac.name
			if costs {
				name += "/costs"
			}
			t.Run(name, func(t *testing.T) {
				for seed := range traces {
					r := rand.New(rand.NewPCG(uint64(seed), 7))
					l, o, params := ac.make(r)
					cost := func() int64 { return 1 }
					if costs {
						cost = func() int64 { return randomCost(r) }
					}
					runTrace(t, r, l, o, ac.inOrder, fmt.Sprintf("seed %d (%s)", seed, params), cost)
					if t.Failed() {
						return
					}
				}
				t.Logf("%d comparisons, %d denied", compared, deniedCompared)
				compared, deniedCompared = 0, 0
			})
		}
	}
}

// randomCost is the cost of a random hit: mostly 1, sometimes nothing,
// a few, or more than any limit of algCases (at most 6).
func randomCost(r *rand.Rand) int64 {
	return []int64{0, 1, 1, 1, 1, 2, 2, 3, 5, 7, 100_000}[r.IntN(11)]
}

// A tracer makes the instants of a random trace: bursts at one instant,
// steps onto exact boundaries, gaps longer than the window, out-of-order
// hits, reads in the past and far future.
type tracer struct {
	r                 *rand.Rand
	now, newest, span int64
	inOrder           bool
}

func newTracer(r *rand.Rand, inOrder bool) *tracer {
	// A trace starts at a random point: before 1970, at 0, or now-ish.
	now := []int64{-5_000_003, 0, 1_764_489_600_123}[r.IntN(3)]
	span := []int64{1, 10, 100, 1000, 10_000}[r.IntN(5)] // typical step
	return &tracer{r: r, now: now, newest: now, span: span, inOrder: inOrder}
}

// next moves time on, and returns the instant of the next step, and
// whether the step reads (otherwise it hits).
func (tr *tracer) next() (at int64, read bool) {
	r, span := tr.r, tr.span
	switch k := r.IntN(20); {
	case k < 6: // burst: same instant
	case k < 12:
		tr.now += r.Int64N(span + 1)
	case k < 15: // onto a boundary, or just around it
		m := []int64{10, 100, 250, 1000, 2500, 10_000}[r.IntN(6)]
		tr.now = (fdiv(tr.now, m)+1)*m + r.Int64N(3) - 1
	case k < 16: // a long gap
		tr.now += 10_000 + r.Int64N(100_000)
	default:
		tr.now += r.Int64N(3 * span)
	}
	tr.newest = max(tr.newest, tr.now)
	at = tr.now
	if !tr.inOrder && r.IntN(6) == 0 { // out of order
		at = tr.newest - r.Int64N(2*span+2)
	}
	if r.IntN(3) != 0 {
		return at, false
	}
	switch r.IntN(8) {
	case 0:
		at = tr.newest + r.Int64N(50_000)
	case 1:
		if !tr.inOrder {
			at = tr.newest - r.Int64N(3*span+2)
		}
	}
	return at, true
}

func runTrace(t *testing.T, r *rand.Rand, l Limiter, o oracle, inOrder bool, name string, costOf func() int64) {
	t.Helper()
	tr := newTracer(r, inOrder)
	for step := range 400 {
		cost := costOf()
		if at, read := tr.next(); read {
			compare(t, decideN(l, at, cost), o, at, cost, fmt.Sprintf("%s step %d: Decide(%d) of cost %d", name, step, at, cost))
		} else {
			what := fmt.Sprintf("%s step %d: Hit(%d) of cost %d", name, step, at, cost)
			v := decideN(l, at, cost)
			if cost == 0 {
				if h := l.HitN(tm(at), 0); h != v {
					t.Fatalf("%s: HitN says %+v, DecideN %+v", what, h, v)
				}
			} else if ok := kernelHit(l, at, cost); ok != v.Allowed {
				t.Fatalf("%s: the kernel's hit says allowed=%v, Decide %+v", what, ok, v)
			}
			compare(t, v, o, at, cost, what)
			o.hit(at, cost)
		}
		if t.Failed() {
			return
		}
	}
}

// decideN is l's verdict at `at` on a hit of that cost: Decide's for a
// plain hit.
func decideN(l Limiter, at, cost int64) Verdict {
	if cost == 1 {
		return l.Decide(tm(at))
	}
	return l.DecideN(tm(at), int(cost))
}

var compared, deniedCompared int

// compare checks v, the verdict at now on a hit of that cost, against
// the reference's. A hit that alone costs more than the limit never
// fits: its retry-after is the time until one that costs the limit does.
func compare(t *testing.T, v Verdict, o oracle, now, cost int64, what string) {
	t.Helper()
	compared++
	if !v.Allowed {
		deniedCompared++
	}
	ok, count, remaining := o.decide(now, cost)
	if v.Allowed != ok || v.Count != count || v.Remaining != remaining {
		t.Fatalf("%s = %+v; reference: allowed %v, count %d, remaining %d", what, v, ok, count, remaining)
	}
	if v.Allowed != fits(v.Count, cost, v.Limit) {
		t.Fatalf("%s = %+v: Allowed is not Count + cost <= Limit", what, v)
	}
	if v.Allowed {
		if v.RetryAfter != 0 {
			t.Fatalf("%s = %+v: retry-after when allowed", what, v)
		}
		return
	}
	retry, fit := v.RetryAfter.Milliseconds(), min(cost, v.Limit)
	if retry < 0 || retry == 0 && cost <= v.Limit || v.RetryAfter%time.Millisecond != 0 {
		t.Fatalf("%s = %+v: retry-after not a positive whole ms", what, v)
	}
	if ok, _, _ := o.decide(now+retry, fit); !ok {
		t.Fatalf("%s = %+v: the reference still denies (cost %d) at now+retry", what, v, fit)
	}
	if ok, _, _ := o.decide(now+retry-1, fit); ok && retry > 0 {
		t.Fatalf("%s = %+v: the reference already allows (cost %d) 1ms before now+retry", what, v, fit)
	}
}

// TestRetryAfterExact checks the promise itself on each algorithm's own
// Decide: at now+retry allowed, 1ms earlier (for sliding_window: one
// resolution step earlier too) not.
func TestRetryAfterExact(t *testing.T) {
	for _, ac := range algCases {
		t.Run(ac.name, func(t *testing.T) {
			for seed := range 100 {
				r := rand.New(rand.NewPCG(uint64(seed), 11))
				l, _, params := ac.make(r)
				now := int64(1_764_489_600_000) + r.Int64N(10_000)
				for range 60 {
					now += r.Int64N(30)
					l.Hit(tm(now))
					q := now + r.Int64N(20)
					v := l.Decide(tm(q))
					if v.Allowed {
						continue
					}
					at := q + v.RetryAfter.Milliseconds()
					if !l.Decide(tm(at)).Allowed || l.Decide(tm(at-1)).Allowed {
						t.Fatalf("seed %d (%s): Decide(%d) = %+v, but allowed(%d) = %v, allowed(%d) = %v", seed, params, q, v,
							at, l.Decide(tm(at)).Allowed, at-1, l.Decide(tm(at-1)).Allowed)
					}
					if sw, ok := l.(*SlidingWindow); ok && sw.Decide(tm(at-sw.k.res)).Allowed {
						t.Fatalf("seed %d: allowed one resolution step before now+retry", seed)
					}
				}
			}
		})
	}
}

func TestConstructorsPanicOnBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"limit 0":        func() { NewFixedWindow(0, time.Second) },
		"window 0":       func() { NewTokenBucket(1, 0, 1) },
		"not a multiple": func() { NewSlidingWindow(1, 1500*time.Millisecond, time.Second) },
		"sub-ms window":  func() { NewGCRA(1, time.Microsecond, 1) },
		"repeat 101":     func() { NewRepeat(101, time.Second) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// kernelHit records a hit of cost 1 to maxCost the way a Set does,
// returning the kernel's own verdict on it.
func kernelHit(l Limiter, at, cost int64) bool {
	switch l := l.(type) {
	case *SlidingWindow:
		return l.k.hit(&l.s, l.ring, at, cost)
	case *SlidingWindowCounter:
		return l.k.hit(&l.s, nil, at, cost)
	case *FixedWindow:
		return l.k.hit(&l.s, nil, at, cost)
	case *TokenBucket:
		return l.k.hit(&l.s, nil, at, cost)
	case *GCRA:
		return l.k.hit(&l.s, nil, at, cost)
	case *Repeat:
		return l.k.hit(&l.s, l.times, at, cost)
	}
	panic("unknown limiter")
}

// atRest reports a standalone limiter's atRest, and a fresh twin of it.
func atRest(l Limiter, now int64) (bool, Limiter) {
	switch l := l.(type) {
	case *SlidingWindow:
		return l.k.atRest(&l.s, l.ring, now), &SlidingWindow{k: l.k, s: l.k.fresh(), ring: make([]uint32, l.k.n)}
	case *SlidingWindowCounter:
		return l.k.atRest(&l.s, nil, now), &SlidingWindowCounter{k: l.k, s: l.k.fresh()}
	case *FixedWindow:
		return l.k.atRest(&l.s, nil, now), &FixedWindow{k: l.k, s: l.k.fresh()}
	case *TokenBucket:
		return l.k.atRest(&l.s, nil, now), &TokenBucket{k: l.k, s: l.k.fresh()}
	case *GCRA:
		return l.k.atRest(&l.s, nil, now), &GCRA{k: l.k, s: l.k.fresh()}
	case *Repeat:
		return l.k.atRest(&l.s, l.times, now), &Repeat{k: l.k, s: l.k.fresh(), times: make([]int64, l.k.limit-1)}
	}
	panic("unknown limiter")
}

// A key at rest may be forgotten: from then on it must answer exactly as a
// key never seen, now and later.
func TestAtRestIsFresh(t *testing.T) {
	for _, ac := range algCases {
		t.Run(ac.name, func(t *testing.T) {
			rested := 0
			for seed := range 200 {
				r := rand.New(rand.NewPCG(uint64(seed), 13))
				l, _, params := ac.make(r)
				now := int64(1_764_489_600_000)
				for step := range 200 {
					now += []int64{0, 1, 2, 5, 50, 500}[r.IntN(6)]
					l.Hit(tm(now))
					for _, d := range []int64{0, 1, 2, 3, 10, 100, 999, 1000, 1001, 2500, 9999, 10_000, 10_001, 30_000, 60_000} {
						rest, fresh := atRest(l, now+d)
						if !rest {
							continue
						}
						rested++
						for _, later := range []int64{0, 1, 7, 1000, 10_000} {
							q := tm(now + d + later)
							if got, want := l.Decide(q), fresh.Decide(q); got != want {
								t.Fatalf("seed %d (%s) step %d: at rest at +%d, but at +%d answers %+v, a fresh key %+v", seed, params, step, d, d+later, got, want)
							}
						}
					}
				}
			}
			if rested == 0 {
				t.Fatal("never at rest")
			}
		})
	}
}
