package rolling

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// oracle keeps every event and counts by scanning.
type oracle struct {
	n    int64
	head int64
	evs  []oracleEvent
}

type oracleEvent struct {
	key int
	b   int64
}

func (o *oracle) inWindow(b int64) bool { return b > o.head-o.n && b <= o.head }

func (o *oracle) add(key int, b int64) error {
	o.head = max(o.head, b)
	if !o.inWindow(b) {
		return ErrLate
	}
	o.evs = append(o.evs, oracleEvent{key, b})
	return nil
}

func (o *oracle) count(key int) (c int64) {
	for _, e := range o.evs {
		if (key < 0 || e.key == key) && o.inWindow(e.b) {
			c++
		}
	}
	return c
}

func (o *oracle) series(key int) []int64 {
	s := make([]int64, o.n)
	for _, e := range o.evs {
		if (key < 0 || e.key == key) && o.inWindow(e.b) {
			s[e.b-(o.head-o.n+1)]++
		}
	}
	return s
}

func (o *oracle) keys() int {
	seen := map[int]bool{}
	for _, e := range o.evs {
		if o.inWindow(e.b) {
			seen[e.key] = true
		}
	}
	return len(seen)
}

// The ring example of the background notes: a 4-second window with hits at
// 10, 10, 11 and 13 holds 2 at 14, because second 10 has aged out.
func TestCounterBackgroundExample(t *testing.T) {
	c := NewCounter(4)
	for _, s := range []int64{10, 10, 11, 13} {
		if err := c.Add(s, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Count(14); got != 2 {
		t.Fatalf("count at 14 = %d, want 2", got)
	}
	if got := c.Series(14, nil); !slices.Equal(got, []int64{1, 0, 1, 0}) {
		t.Fatalf("series at 14 = %v, want [1 0 1 0] for seconds 11..14", got)
	}
}

func TestCounterEdges(t *testing.T) {
	t.Run("boundary [t-W+1, t]", func(t *testing.T) {
		c := NewCounter(5)
		c.Add(0, 1)
		if got := c.Count(4); got != 1 {
			t.Fatalf("bucket 0 at 4 (window [0,4]) = %d, want 1", got)
		}
		if got := c.Count(5); got != 0 {
			t.Fatalf("bucket 0 at 5 (window [1,5]) = %d, want 0", got)
		}
	})
	t.Run("stale bucket reused", func(t *testing.T) {
		c := NewCounter(5)
		c.Add(0, 3)
		c.Add(5, 1) // the slot of bucket 0
		if got := c.Count(5); got != 1 {
			t.Fatalf("count = %d, want 1: bucket 0 must be emptied before reuse", got)
		}
	})
	t.Run("gap longer than the window", func(t *testing.T) {
		c := NewCounter(5)
		c.Add(1, 2)
		c.Add(3, 2)
		c.Add(1_000_000_000_000, 1)
		if got := c.Count(1_000_000_000_000); got != 1 {
			t.Fatalf("count = %d, want 1", got)
		}
	})
	t.Run("late but inside the window", func(t *testing.T) {
		c := NewCounter(5)
		c.Add(10, 1)
		if err := c.Add(6, 1); err != nil {
			t.Fatalf("bucket 6 at head 10 is in [6,10]: %v", err)
		}
		if err := c.Add(5, 1); !errors.Is(err, ErrLate) {
			t.Fatalf("bucket 5 at head 10: err = %v, want ErrLate", err)
		}
		if got := c.Count(10); got != 2 {
			t.Fatalf("count = %d, want 2", got)
		}
		if got := c.Count(11); got != 1 {
			t.Fatalf("count at 11 = %d, want 1", got)
		}
	})
	t.Run("before the epoch", func(t *testing.T) {
		c := NewCounter(3)
		c.Add(-2, 1)
		c.Add(-1, 1)
		if got := c.Series(0, nil); !slices.Equal(got, []int64{1, 1, 0}) {
			t.Fatalf("series = %v", got)
		}
	})
}

// trace draws bucket numbers that mostly move forward, sometimes late
// (inside or outside the window), sometimes far ahead.
func trace(r *rand.Rand, n int64, head *int64) int64 {
	switch p := r.IntN(100); {
	case p < 60:
		*head += int64(r.IntN(2))
	case p < 80:
		return *head - int64(r.IntN(int(2*n)+1)) // late, maybe too late
	case p < 95:
		*head += int64(r.IntN(int(n) + 1))
	default:
		*head += n + int64(r.IntN(int(3*n)+1)) // a gap longer than the window
	}
	return *head
}

func TestCounterOracle(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		n := int64(1 + r.IntN(12))
		c := NewCounter(int(n))
		o := &oracle{n: n}
		var head int64 = int64(r.IntN(100))
		o.head = -1 << 40 // nothing seen yet
		for step := range 400 {
			b := trace(r, n, &head)
			if r.IntN(4) == 0 { // a read
				rb := max(b, o.head)
				o.head = rb
				if got, want := c.Count(rb), o.count(-1); got != want {
					t.Fatalf("seed %d step %d: count(%d) = %d, want %d", seed, step, rb, got, want)
				}
				if got, want := c.Series(rb, nil), o.series(-1); !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: series = %v, want %v", seed, step, got, want)
				}
				continue
			}
			k := int64(1 + r.IntN(3))
			var want error
			for range k {
				want = o.add(0, b)
			}
			if err := c.Add(b, k); !errors.Is(err, want) {
				t.Fatalf("seed %d step %d: add(%d) = %v, want %v", seed, step, b, err, want)
			}
		}
	}
}

type testKey struct {
	id int
	Tally
	fell int64
}

func TestKeyedOracle(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 2))
		n := int64(1 + r.IntN(12))
		keys := make([]*testKey, 1+r.IntN(8))
		for i := range keys {
			keys[i] = &testKey{id: i}
		}
		w := NewKeyed(int(n), func(k *testKey) *Tally { return &k.Tally },
			func(k *testKey, c int64) { k.fell += c })
		o := &oracle{n: n}
		var head int64 = int64(r.IntN(100))
		o.head = -1 << 40 // nothing seen yet
		added := make([]int64, len(keys))
		for step := range 400 {
			b := trace(r, n, &head)
			if r.IntN(4) == 0 {
				rb := max(b, o.head)
				o.head = rb
				w.Advance(rb)
				if got, want := w.Keys(), o.keys(); got != want {
					t.Fatalf("seed %d step %d: keys = %d, want %d", seed, step, got, want)
				}
				for _, k := range keys {
					want := o.count(k.id)
					if k.Count != want {
						t.Fatalf("seed %d step %d: key %d count = %d, want %d", seed, step, k.id, k.Count, want)
					}
					if added[k.id]-k.fell != want {
						t.Fatalf("seed %d step %d: key %d: fell %d of %d added, holds %d", seed, step, k.id, k.fell, added[k.id], want)
					}
					if got, want := w.Series(k, nil), o.series(k.id); !slices.Equal(got, want) {
						t.Fatalf("seed %d step %d: key %d series = %v, want %v", seed, step, k.id, got, want)
					}
					if want == 0 && len(k.older()) != 0 {
						t.Fatalf("seed %d step %d: key %d holds %d cells at count 0", seed, step, k.id, len(k.older()))
					}
				}
				continue
			}
			k := keys[r.IntN(len(keys))]
			c := int64(1 + r.IntN(3))
			var want error
			for range c {
				want = o.add(k.id, b)
			}
			if err := w.Add(k, &k.Tally, b, c); !errors.Is(err, want) {
				t.Fatalf("seed %d step %d: add(%d) = %v, want %v", seed, step, b, err, want)
			}
			if want == nil {
				added[k.id] += c
			}
		}
	}
}

// A key that stays busy reuses its cell buffer: no allocation in steady state.
func TestKeyedSteadyStateAllocs(t *testing.T) {
	k := &testKey{}
	w := NewKeyed(60, func(k *testKey) *Tally { return &k.Tally }, nil)
	b := int64(0)
	for ; b < 1000; b++ {
		w.Add(k, &k.Tally, b, 1)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		w.Add(k, &k.Tally, b, 1)
		b++
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per add in steady state", allocs)
	}
	if k.cap > 4*60 {
		t.Fatalf("cell buffer grew to %d for a 60-bucket window", k.cap)
	}
}

func TestParseWindows(t *testing.T) {
	good := []struct {
		in   string
		want []Window
	}{
		{"1m,5m,1h", []Window{{"1m", time.Minute, time.Second}, {"5m", 5 * time.Minute, 5 * time.Second}, {"1h", time.Hour, time.Minute}}},
		{"7d:1h", []Window{{"7d", 7 * 24 * time.Hour, time.Hour}}},
		{"1d12h:1h", []Window{{"1d12h", 36 * time.Hour, time.Hour}}},
		{"30s", []Window{{"30s", 30 * time.Second, time.Second}}},
		{"90s", []Window{{"90s", 90 * time.Second, 1500 * time.Millisecond}}},
		{" 10s:2s , 1m ", []Window{{"10s", 10 * time.Second, 2 * time.Second}, {"1m", time.Minute, time.Second}}},
	}
	for _, g := range good {
		got, err := ParseWindows(g.in)
		if err != nil {
			t.Errorf("%q: %v", g.in, err)
			continue
		}
		if !slices.Equal(got, g.want) {
			t.Errorf("%q = %v, want %v", g.in, got, g.want)
		}
	}
	bad := map[string]string{
		"":              `no windows given (example: 1m,5m,1h or 7d:1h)`,
		"1m,1m":         `window "1m" given twice`,
		"1x":            `window "1x": size: "1x" is not a duration (examples: 90s, 5m, 1h, 7d)`,
		"0s":            `window "0s": size must be positive`,
		"-1m":           `window "-1m": size: "-1m": no sign allowed`,
		"1m:7s":         `window "1m:7s": size 1m0s is not a whole multiple of resolution 7s`,
		"1m:500ms":      `window "1m:500ms": resolution 500ms is below the minimum 1s`,
		"7d:1s":         `window "7d:1s": 604800 buckets (size/resolution) is more than 20000; use a coarser resolution`,
		"1m:":           `window "1m:": resolution: empty duration`,
		"1500ms":        `window "1500ms": resolution 25ms is below the minimum 1s`,
		"1m,":           `window "": size: empty duration`,
		"1m:1.0000001s": `window "1m:1.0000001s": resolution 1.0000001s is not a whole number of milliseconds`,
	}
	for in, want := range bad {
		_, err := ParseWindows(in)
		if err == nil || err.Error() != want {
			t.Errorf("%q: err = %v, want %s", in, err, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"10s": 10 * time.Second, "1m30s": 90 * time.Second, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour,
		"1.5d": 36 * time.Hour, "250ms": 250 * time.Millisecond, "0": 0,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "1", "10x", "1dd", "d1", "1d-1h", "200000d", "1.2.3d", "+", "1 d", "-1d", "-1s", "+1s"} {
		if d, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
		}
	}
}

func FuzzParseWindows(f *testing.F) {
	for _, s := range []string{"1m,5m,1h", "7d:1h", "1d12h:1h", "90s", "1.5d:1h", "1m:7s", "", ",", "1e9h", "99999999999d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ws, err := ParseWindows(s)
		if err != nil {
			return
		}
		for _, w := range ws {
			if w.Res < MinResolution || w.Size%w.Res != 0 || w.Buckets() < 1 || w.Buckets() > MaxBuckets {
				t.Fatalf("%q accepted a bad window %+v", s, w)
			}
			again, err := ParseWindow(w.Name + ":" + w.Res.String())
			if err != nil || again.Size != w.Size || again.Res != w.Res {
				t.Fatalf("%q: window %+v does not parse back: %+v %v", s, w, again, err)
			}
		}
	})
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 90 * time.Second: "1m30s", time.Minute: "1m", time.Hour: "1h",
		90 * time.Minute: "1h30m", 36 * time.Hour: "36h", 250 * time.Millisecond: "250ms",
	} {
		s := FormatDuration(d)
		back, err := ParseDuration(s)
		if s != want || err != nil || back != d {
			t.Errorf("FormatDuration(%v) = %q, want %q; read back as %v, %v", d, s, want, back, err)
		}
	}
}

// A key in every bucket of the largest window keeps its cells in an array
// that stops growing at maxCells, and counts right all along.
func TestKeyedLargestWindow(t *testing.T) {
	k := &testKey{}
	w := NewKeyed(MaxBuckets, func(k *testKey) *Tally { return &k.Tally }, nil)
	for b := range int64(3 * MaxBuckets) {
		if err := w.Add(k, &k.Tally, b, 2); err != nil {
			t.Fatal(err)
		}
		if want := 2 * min(b+1, MaxBuckets); k.Count != want || int64(k.NumCells()) != want/2 {
			t.Fatalf("bucket %d: count %d in %d cells, want %d", b, k.Count, k.NumCells(), want)
		}
	}
	if k.cap > maxCells {
		t.Fatalf("cell array of %d, more than %d", k.cap, maxCells)
	}
	if got := w.Series(k, nil); len(got) != MaxBuckets || got[0] != 2 || got[MaxBuckets-1] != 2 {
		t.Fatalf("series of %d, first %d, last %d", len(got), got[0], got[len(got)-1])
	}
}
