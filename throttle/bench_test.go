package throttle

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The benchmarks decide for 100,000 keys (users), chosen uniformly or with
// Zipf-skewed activity from a precomputed sequence, all tracked before the
// timer starts. One op is one decision that also records the hit: Observe
// on a Set holding one policy, or Allow on the x/time/rate Limiter of the
// key, kept in a map guarded by an RWMutex (a keyed limiter needs one; the
// Set is safe for concurrent use too) under a cloned key (the Set clones
// too, since a caller's strings may alias its buffers). Time advances 10µs per op, so each
// key sees about one message a second on average.
//
//	go test -run='^$' -bench=. -benchtime=2000000x ./throttle/
//
// Reported: ns/op, allocs/op, decisions/s and bytes/key, the heap held per
// tracked key (state, index and the key strings) after a GC.

const benchKeys = 100_000

var benchNames = func() []string {
	names := make([]string, benchKeys)
	for i := range names {
		names[i] = fmt.Sprintf("user-%06d", i)
	}
	return names
}()

func benchSeq(zipf bool) []int32 {
	seq := make([]int32, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, benchKeys-1)
	for i := range seq {
		if zipf {
			seq[i] = int32(z.Uint64())
		} else {
			seq[i] = int32(r.IntN(benchKeys))
		}
	}
	return seq
}

var benchPolicies = []Policy{
	{Name: "sliding_window", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 10, Window: 10 * time.Second},
	{Name: "sliding_window_counter", Scope: ScopeUser, Algorithm: AlgSlidingWindowCounter, Limit: 10, Window: 10 * time.Second},
	{Name: "fixed_window", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 10, Window: 10 * time.Second},
	{Name: "token_bucket", Scope: ScopeUser, Algorithm: AlgTokenBucket, Limit: 10, Window: 10 * time.Second},
	{Name: "gcra", Scope: ScopeUser, Algorithm: AlgGCRA, Limit: 10, Window: 10 * time.Second},
	{Name: "repeat", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 1, Window: 10 * time.Second},
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func report(b *testing.B, perKey uint64) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(perKey)/benchKeys, "bytes/key")
}

func BenchmarkDecisions(b *testing.B) {
	base := time.UnixMilli(1_764_489_600_000)
	for _, dist := range []string{"uniform", "zipf"} {
		seq := benchSeq(dist == "zipf")
		for _, p := range benchPolicies {
			b.Run(p.Name+"/"+dist, func(b *testing.B) {
				before := heapInUse()
				s := mustSet(b, []Policy{p})
				for _, name := range benchNames {
					s.Observe(base, "lobby", name, "hello", false)
				}
				perKey := heapInUse() - before
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					now := base.Add(time.Duration(i) * 10 * time.Microsecond)
					s.Observe(now, "lobby", benchNames[seq[i&(len(seq)-1)]], "hello", false)
				}
				b.StopTimer()
				report(b, perKey)
				runtime.KeepAlive(s)
			})
		}
		b.Run("x_time_rate/"+dist, func(b *testing.B) {
			before := heapInUse()
			m := newRateMap()
			for _, name := range benchNames {
				m.allow(base, name)
			}
			perKey := heapInUse() - before
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now := base.Add(time.Duration(i) * 10 * time.Microsecond)
				m.allow(now, benchNames[seq[i&(len(seq)-1)]])
			}
			b.StopTimer()
			report(b, perKey)
			runtime.KeepAlive(m)
		})
	}
}

// rateMap is the keyed x/time/rate baseline: one Limiter per key, 10 per
// 10s with bursts of 10, like the benchmark policies.
type rateMap struct {
	mu sync.RWMutex
	m  map[string]*rate.Limiter
}

func newRateMap() *rateMap { return &rateMap{m: make(map[string]*rate.Limiter)} }

func (r *rateMap) allow(now time.Time, key string) bool {
	r.mu.RLock()
	l := r.m[key]
	r.mu.RUnlock()
	if l == nil {
		r.mu.Lock()
		if l = r.m[key]; l == nil {
			l = rate.NewLimiter(rate.Every(time.Second), 10)
			r.m[strings.Clone(key)] = l // as the Set does: keys may alias a buffer
		}
		r.mu.Unlock()
	}
	return l.AllowN(now, 1)
}

// BenchmarkSideBySide runs the Set and the x/time/rate map on the same
// keys and times in alternating chunks of 4096 decisions, so that both see
// the same machine (other processes, cache pressure): on a shared machine
// this comparison is steadier than two separate benchmarks. It reports
// each one's ns per decision and their ratio (set/rate: below 1 means the
// Set is faster).
func BenchmarkSideBySide(b *testing.B) {
	base := time.UnixMilli(1_764_489_600_000)
	for _, dist := range []string{"uniform", "zipf"} {
		seq := benchSeq(dist == "zipf")
		for _, p := range benchPolicies[3:5] {
			b.Run(p.Name+"/"+dist, func(b *testing.B) {
				s := mustSet(b, []Policy{p})
				m := newRateMap()
				for _, name := range benchNames {
					s.Observe(base, "lobby", name, "", false)
					m.allow(base, name)
				}
				set := func(start, end int) time.Duration {
					t0 := time.Now()
					for i := start; i < end; i++ {
						s.Observe(base.Add(time.Duration(i)*10*time.Microsecond), "lobby", benchNames[seq[i&(len(seq)-1)]], "", false)
					}
					return time.Since(t0)
				}
				rate := func(start, end int) time.Duration {
					t0 := time.Now()
					for i := start; i < end; i++ {
						m.allow(base.Add(time.Duration(i)*10*time.Microsecond), benchNames[seq[i&(len(seq)-1)]])
					}
					return time.Since(t0)
				}
				var setTime, rateTime time.Duration
				b.ResetTimer()
				// Who goes first alternates: the second one finds the key
				// names and the sequence in cache.
				for start, n := 0, 0; start < b.N; start, n = start+4096, n+1 {
					end := min(start+4096, b.N)
					if n%2 == 0 {
						setTime += set(start, end)
						rateTime += rate(start, end)
					} else {
						rateTime += rate(start, end)
						setTime += set(start, end)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(setTime.Nanoseconds())/float64(b.N), "set-ns/decision")
				b.ReportMetric(float64(rateTime.Nanoseconds())/float64(b.N), "rate-ns/decision")
				b.ReportMetric(float64(setTime)/float64(rateTime), "set/rate")
			})
		}
	}
}

// BenchmarkDefaultPolicies is the service's hot path: Observe and Check
// with the three default policies (user_in_room, user and repeat keys) for
// 100,000 users in 1,000 rooms.
func BenchmarkDefaultPolicies(b *testing.B) {
	base := time.UnixMilli(1_764_489_600_000)
	seq := benchSeq(true)
	rooms := make([]string, 1000)
	for i := range rooms {
		rooms[i] = fmt.Sprint("room-", i)
	}
	s := mustSet(b, DefaultPolicies())
	for i, name := range benchNames {
		s.Observe(base, rooms[i%len(rooms)], name, "hello there", false)
	}
	b.Run("observe", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			k := seq[i&(len(seq)-1)]
			s.Observe(base.Add(time.Duration(i)*10*time.Microsecond), rooms[int(k)%len(rooms)], benchNames[k], "hello there", false)
		}
	})
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			k := seq[i&(len(seq)-1)]
			s.Check(base.Add(time.Duration(i)*10*time.Microsecond), rooms[int(k)%len(rooms)], benchNames[k], "hello there", true)
		}
	})
}
