package topk

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

type key struct {
	Item  // first: an *Item the heap gives back is its key
	Name  string
	count int64
}

// testKeys tells a heap of keys their counts and names.
type testKeys struct{}

func keyOf(it *Item) *key             { return (*key)(unsafe.Pointer(it)) }
func (testKeys) Count(it *Item) int64 { return keyOf(it).count }
func (testKeys) Name(it *Item) string { return keyOf(it).Name }

// newKeys names keys so that ties are decided in the first 8 bytes, after
// them, and by length alone.
func newKeys(n int) []*key {
	ks := make([]*key, n)
	for i := range ks {
		name := fmt.Sprintf("k%03d", i)
		switch i % 3 {
		case 1:
			name = fmt.Sprintf("a-long-shared-prefix-%03d", i)
		case 2:
			name = strings.Repeat("z", i)
		}
		ks[i] = &key{Name: name}
	}
	return ks
}

// all lists the keys for Top's rebuilds.
func all(ks []*key) iter.Seq[*Item] {
	return func(yield func(*Item) bool) {
		for _, x := range ks {
			if !yield(&x.Item) {
				return
			}
		}
	}
}

// live counts the keys above zero, as an owner would for Fell.
func live(ks []*key) int {
	n := 0
	for _, x := range ks {
		if x.count > 0 {
			n++
		}
	}
	return n
}

// bruteTop sorts every key: the oracle.
func bruteTop(ks []*key, k int) []string {
	live := []*key{}
	for _, x := range ks {
		if x.count > 0 {
			live = append(live, x)
		}
	}
	slices.SortFunc(live, func(a, b *key) int {
		if a.count != b.count {
			return int(b.count - a.count)
		}
		return strings.Compare(a.Name, b.Name)
	})
	var out []string
	for _, x := range live[:min(k, len(live))] {
		out = append(out, fmt.Sprintf("%s=%d", x.Name, x.count))
	}
	return out
}

func names(items []*Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, fmt.Sprintf("%s=%d", keyOf(it).Name, keyOf(it).count))
	}
	return out
}

func TestTopOracle(t *testing.T) {
	for seed := range uint64(300) {
		oracleRun(t, seed, 1+int(seed%40), 2000, 2)
	}
}

// With thousands of keys and small reads, compaction raises the floor and
// expiry then eats into what is above it, so Top has to rebuild.
func TestTopOracleFloor(t *testing.T) {
	total := 0
	for seed := range uint64(12) {
		rose, rebuilds := oracleRun(t, seed, 300+int(seed)*100, 20_000, 5+int(seed%3)*20)
		if !rose {
			t.Errorf("seed %d: the floor never rose", seed)
		}
		total += rebuilds
	}
	if total < 10 {
		t.Errorf("%d rebuilds in all", total)
	}
}

// oracleRun pushes, lowers and reads n keys at random for steps steps,
// reading up to maxK at a time, and compares every read with bruteTop. It
// reports whether the floor rose, and how many reads had to rebuild.
func oracleRun(t *testing.T, seed uint64, n, steps, maxK int) (rose bool, rebuilds int) {
	r := rand.New(rand.NewPCG(seed, 3))
	ks := newKeys(n)
	var h Heap
	for step := range steps {
		rose = rose || h.floor > 0
		x := ks[r.IntN(len(ks))]
		if r.IntN(4) == 0 { // some keys are much busier
			x = ks[r.IntN(min(len(ks), 8))]
		}
		switch p := r.IntN(10_000); {
		case p < 5500:
			x.count += int64(1 + r.IntN(2))
			h.Push(&x.Item, x.count)
		case p < 8500:
			if x.count > 0 {
				x.count -= min(x.count, int64(1+r.IntN(3))) // expiry: no call
				if x.count == 0 {
					h.Fell(live(ks))
				}
			}
		case p < 8505:
			for _, y := range ks { // everything expires
				y.count = 0
			}
			h.Fell(0)
		case p < 8510:
			for _, y := range ks { // a big expiry: most keys fall below the floor
				y.count = min(y.count, int64(1+r.IntN(3)))
			}
		case p < 8700:
			k := 1 + r.IntN(maxK)
			floor := h.floor
			got, want := names(h.Top(k, nil, testKeys{}, all(ks))), bruteTop(ks, k)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: top %d = %v, want %v", seed, step, k, got, want)
			}
			if h.floor < floor {
				rebuilds++
			}
		}
		if h.Len() > (1+staleFactor)*len(ks)+minLimit+maxPending+1 {
			t.Fatalf("seed %d step %d: %d entries for %d keys", seed, step, h.Len(), len(ks))
		}
	}
	return rose, rebuilds
}

func TestTies(t *testing.T) {
	ks := newKeys(5)
	var h Heap
	for _, i := range []int{3, 1, 4, 0, 2} {
		ks[i].count = 7
		h.Push(&ks[i].Item, ks[i].count)
	}
	if got := names(h.Top(3, nil, testKeys{}, all(ks))); !slices.Equal(got, []string{"a-long-shared-prefix-001=7", "a-long-shared-prefix-004=7", "k000=7"}) {
		t.Fatalf("ties: %v", got)
	}
}

// Memory follows the live keys, not the pushes: a million increments of a
// few keys, with their counts expiring between, keep the heap small.
func TestCompactionBoundsMemory(t *testing.T) {
	ks := newKeys(10)
	var h Heap
	for i := range 1_000_000 {
		x := ks[i%len(ks)]
		x.count++
		h.Push(&x.Item, x.count)
		if i%1000 == 999 {
			for _, y := range ks {
				y.count = 0
			}
		}
	}
	if h.Len() > (1+staleFactor)*len(ks)+minLimit+maxPending {
		t.Fatalf("%d entries for %d keys", h.Len(), len(ks))
	}
	if cap(h.es) > 4*((1+staleFactor)*len(ks)+minLimit) {
		t.Fatalf("capacity %d kept", cap(h.es))
	}
}

// A heap whose keys all fell to zero holds nothing, not even capacity: a
// flood of keys that went quiet is not kept reachable.
func TestFellForgets(t *testing.T) {
	ks := newKeys(10_000)
	var h Heap
	for _, x := range ks {
		x.count = 1
		h.Push(&x.Item, x.count)
	}
	h.Top(10, nil, testKeys{}, all(ks))
	for i, x := range ks {
		x.count = 0
		h.Fell(len(ks) - 1 - i)
		if h.Len() > (1+staleFactor)*(len(ks)-1-i)+minLimit+maxPending {
			t.Fatalf("%d entries for %d live keys", h.Len(), len(ks)-1-i)
		}
	}
	if h.Len() != 0 || cap(h.es) != 0 || cap(h.pending) != 0 {
		t.Fatalf("%d entries, capacity %d and %d kept", h.Len(), cap(h.es), cap(h.pending))
	}
	ks[3].count = 2 // and it still works
	h.Push(&ks[3].Item, ks[3].count)
	if got := names(h.Top(2, nil, testKeys{}, all(ks))); !slices.Equal(got, []string{ks[3].Name + "=2"}) {
		t.Fatalf("after forgetting: %v", got)
	}
}

// A heap nobody reads stops taking pushes and lets go of its entries; the
// next read rebuilds it and is right.
func TestIdleHeapTurnsOff(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	ks := newKeys(500)
	var h Heap
	if h.Push(&ks[0].Item, ks[0].count); h.Len() != 0 {
		t.Fatalf("a heap never read took a push")
	}
	for round := range 5 {
		h.Top(3, nil, testKeys{}, all(ks)) // on
		off := false
		for range 10 * (idleFactor*len(ks) + minIdle) {
			x := ks[r.IntN(len(ks))]
			x.count++
			h.Push(&x.Item, x.count)
			if !h.on {
				off = true
				if h.Len() != 0 {
					t.Fatalf("round %d: off with %d entries", round, h.Len())
				}
			}
		}
		if !off {
			t.Fatalf("round %d: still on after %d pushes without a read", round, 10*(idleFactor*len(ks)+minIdle))
		}
		if got, want := names(h.Top(10, nil, testKeys{}, all(ks))), bruteTop(ks, 10); !slices.Equal(got, want) {
			t.Fatalf("round %d: top 10 = %v, want %v", round, got, want)
		}
	}
}

func TestTopDoesNotAllocate(t *testing.T) {
	ks := newKeys(1000)
	var h Heap
	for i, x := range ks {
		x.count = int64(i % 17)
		h.Push(&x.Item, x.count)
	}
	dst := make([]*Item, 0, 10)
	seq := all(ks)
	h.Top(10, dst, testKeys{}, seq)
	if a := testing.AllocsPerRun(100, func() { h.Top(10, dst[:0], testKeys{}, seq) }); a != 0 {
		t.Fatalf("%v allocations per Top", a)
	}
}

func BenchmarkPush(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ks := newKeys(n)
			var h Heap
			r := rand.New(rand.NewPCG(1, 1))
			z := rand.NewZipf(r, 1.1, 1, uint64(n-1))
			idx := make([]int, 1<<16)
			for i := range idx {
				idx[i] = int(z.Uint64())
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				x := ks[idx[i&(len(idx)-1)]]
				x.count++
				h.Push(&x.Item, x.count)
			}
		})
	}
}

func BenchmarkTop10(b *testing.B) {
	ks := newKeys(100_000)
	var h Heap
	r := rand.New(rand.NewPCG(1, 1))
	for _, x := range ks {
		x.count = int64(1 + r.IntN(1000))
		h.Push(&x.Item, x.count)
	}
	dst := make([]*Item, 0, 10)
	b.ReportAllocs()
	for b.Loop() {
		dst = h.Top(10, dst[:0], testKeys{}, all(ks))
	}
}
