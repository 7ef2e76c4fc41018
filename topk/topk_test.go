package topk

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

type key struct {
	Item
	count int64
}

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
		ks[i] = &key{}
		ks[i].Item = Item{Name: name, Count: &ks[i].count}
	}
	return ks
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
		out = append(out, fmt.Sprintf("%s=%d", it.Name, *it.Count))
	}
	return out
}

func TestTopOracle(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 3))
		ks := newKeys(1 + r.IntN(40))
		var h Heap
		for step := range 2000 {
			x := ks[r.IntN(len(ks))]
			switch p := r.IntN(100); {
			case p < 55:
				x.count += int64(1 + r.IntN(2))
				h.Push(&x.Item)
			case p < 85:
				x.count -= min(x.count, int64(1+r.IntN(3))) // expiry: no call
			case p < 87:
				for _, y := range ks { // everything expires
					y.count = 0
				}
			default:
				k := 1 + r.IntN(len(ks)+2)
				got, want := names(h.Top(k, nil)), bruteTop(ks, k)
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: top %d = %v, want %v", seed, step, k, got, want)
				}
			}
			if h.Len() > (1+staleFactor)*len(ks)+minLimit+maxPending+1 {
				t.Fatalf("seed %d step %d: %d entries for %d keys", seed, step, h.Len(), len(ks))
			}
		}
	}
}

func TestTies(t *testing.T) {
	ks := newKeys(5)
	var h Heap
	for _, i := range []int{3, 1, 4, 0, 2} {
		ks[i].count = 7
		h.Push(&ks[i].Item)
	}
	if got := names(h.Top(3, nil)); !slices.Equal(got, []string{"a-long-shared-prefix-001=7", "a-long-shared-prefix-004=7", "k000=7"}) {
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
		h.Push(&x.Item)
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

func TestTopDoesNotAllocate(t *testing.T) {
	ks := newKeys(1000)
	var h Heap
	for i, x := range ks {
		x.count = int64(i % 17)
		h.Push(&x.Item)
	}
	dst := make([]*Item, 0, 10)
	h.Top(10, dst)
	if a := testing.AllocsPerRun(100, func() { h.Top(10, dst[:0]) }); a != 0 {
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
				h.Push(&x.Item)
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
		h.Push(&x.Item)
	}
	dst := make([]*Item, 0, 10)
	b.ReportAllocs()
	for b.Loop() {
		dst = h.Top(10, dst[:0])
	}
}
