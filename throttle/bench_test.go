package throttle

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/chatpulse/chatpulse/chat"
)

// The benchmarks decide for 100,000 keys (users), chosen uniformly or with
// Zipf-skewed activity from a precomputed sequence, all tracked before the
// timer starts. One op is one decision that also records the hit: Observe
// on a Set holding one policy, or Allow on the x/time/rate Limiter of the
// key, kept in a map guarded by an RWMutex (a keyed limiter needs one; the
// Set is safe for concurrent use too) under a cloned key (the Set clones
// too, since a caller's strings may alias its buffers). Time advances 10µs per op (the Set
// sees it in whole milliseconds), so each key sees about one message a second on average.
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

// benchBase is when the benchmarks' time starts, and benchMs the Unix
// milliseconds of op i, 10µs after op i-1.
const benchBase = 1_764_489_600_000

func benchMs(i int) int64 { return benchBase + int64(i)/100 }

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
	base := time.UnixMilli(benchBase)
	for _, dist := range []string{"uniform", "zipf"} {
		seq := benchSeq(dist == "zipf")
		for _, p := range benchPolicies {
			b.Run(p.Name+"/"+dist, func(b *testing.B) {
				before := heapInUse()
				s := mustSet(b, []Policy{p})
				for _, name := range benchNames {
					s.Observe(chat.Event{TS: benchBase, Room: "lobby", User: name, Text: "hello"})
				}
				perKey := heapInUse() - before
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					s.Observe(chat.Event{TS: benchMs(i), Room: "lobby", User: benchNames[seq[i&(len(seq)-1)]], Text: "hello"})
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
	base := time.UnixMilli(benchBase)
	for _, dist := range []string{"uniform", "zipf"} {
		seq := benchSeq(dist == "zipf")
		for _, p := range benchPolicies[3:5] {
			b.Run(p.Name+"/"+dist, func(b *testing.B) {
				s := mustSet(b, []Policy{p})
				m := newRateMap()
				for _, name := range benchNames {
					s.Observe(chat.Event{TS: benchBase, Room: "lobby", User: name})
					m.allow(base, name)
				}
				set := func(start, end int) time.Duration {
					t0 := time.Now()
					for i := start; i < end; i++ {
						s.Observe(chat.Event{TS: benchMs(i), Room: "lobby", User: benchNames[seq[i&(len(seq)-1)]]})
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
	seq := benchSeq(true)
	rooms := make([]string, 1000)
	for i := range rooms {
		rooms[i] = fmt.Sprint("room-", i)
	}
	s := mustSet(b, DefaultPolicies())
	for i, name := range benchNames {
		s.Observe(chat.Event{TS: benchBase, Room: rooms[i%len(rooms)], User: name, Text: "hello there"})
	}
	b.Run("observe", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			k := seq[i&(len(seq)-1)]
			s.Observe(chat.Event{TS: benchMs(i), Room: rooms[int(k)%len(rooms)], User: benchNames[k], Text: "hello there"})
		}
	})
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			k := seq[i&(len(seq)-1)]
			s.Check(benchMs(i), rooms[int(k)%len(rooms)], benchNames[k], "hello there", true)
		}
	})
}

// streamEvent is one message of benchStream.
type streamEvent struct {
	room, user, text string
	ts               int64 // ms after the stream's start
}

// benchStream is a realistic ingest stream, shaped as internal/traffic
// makes it for chatgen and chatbench: 10,000 users with Zipf-skewed activity
// (s = 1.1), each talking in one to three of 100 rooms (Zipf, s = 1.3), and
// texts of 3 to 10 words out of 36, so nearly every text is new; rate events
// per second of event time, in time order.
func benchStream(n int, rate int64) []streamEvent {
	const users, rooms = 10_000, 100
	words := strings.Fields("hi hello anyone seen the new build deploy is green again lunch ? thanks great idea let's ship it today bug fixed works for me lol brb meeting in five minutes coffee please review my PR")
	r := rand.New(rand.NewPCG(7, 8))
	roomZipf := rand.NewZipf(r, 1.3, 1, rooms-1)
	member := make([][]int, users)
	for u := range member {
		for range 1 + r.IntN(3) {
			member[u] = append(member[u], int(roomZipf.Uint64()))
		}
	}
	userZipf := rand.NewZipf(r, 1.1, 1, users-1)
	evs := make([]streamEvent, n)
	var b strings.Builder
	for i := range evs {
		u := int(userZipf.Uint64())
		b.Reset()
		for w := range 3 + r.IntN(8) {
			if w > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[r.IntN(len(words))])
		}
		evs[i] = streamEvent{
			room: fmt.Sprint("room-", member[u][r.IntN(len(member[u]))]),
			user: fmt.Sprint("user-", u),
			text: b.String(),
			ts:   int64(i) * 1000 / rate,
		}
	}
	return evs
}

// cpuTime is the CPU time the process has used so far, garbage collection
// included: on a shared machine it varies less than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkObserveStream feeds the default policies the realistic stream of
// benchStream at 3,000 events per second of event time, one Observe per
// event, after a warm-up of 70 s of events (longer than every window, so
// the tables are in their steady state). The stream loops, time still
// moving forward. One op is one event; cpu-ns/event counts the CPU time of
// the whole process, garbage collection included.
func BenchmarkObserveStream(b *testing.B) {
	benchStreamWith(b, func(s *Set, evs []chat.Event) {
		for i := range evs {
			s.Observe(evs[i])
		}
	})
}

// BenchmarkObserveStreamBatch is BenchmarkObserveStream with ObserveBatch
// fed 64 events at a time, as ingest does.
func BenchmarkObserveStreamBatch(b *testing.B) {
	benchStreamWith(b, func(s *Set, evs []chat.Event) { s.ObserveBatch(evs, func(int, Alert) {}, nil) })
}

// BenchmarkObserveSpike is BenchmarkObserveStream and
// BenchmarkObserveStreamBatch with the default policies alone, and with a
// spike beside them (window 1m, baseline 1h, at 1s; 100 rooms).
func BenchmarkObserveSpike(b *testing.B) {
	spike := Policy{Name: "surge", Scope: ScopeRoom, Algorithm: AlgSpike, Window: time.Minute, Baseline: time.Hour}
	observe := func(s *Set, evs []chat.Event) {
		for i := range evs {
			s.Observe(evs[i])
		}
	}
	batch := func(s *Set, evs []chat.Event) { s.ObserveBatch(evs, func(int, Alert) {}, nil) }
	for _, way := range []struct {
		name string
		fn   func(*Set, []chat.Event)
	}{{"observe", observe}, {"batch", batch}} {
		b.Run(way.name+"/none", func(b *testing.B) { benchStreamOf(b, DefaultPolicies(), way.fn) })
		b.Run(way.name+"/spike", func(b *testing.B) { benchStreamOf(b, append(DefaultPolicies(), spike), way.fn) })
	}
}

func benchStreamWith(b *testing.B, observe func(*Set, []chat.Event)) {
	benchStreamOf(b, DefaultPolicies(), observe)
}

func benchStreamOf(b *testing.B, policies []Policy, observe func(*Set, []chat.Event)) {
	const rate, warm = 3000, 210_000
	evs := benchStream(1<<18, rate)
	period := int64(len(evs)) * 1000 / rate
	s := mustSet(b, policies)
	var batch [64]chat.Event
	run := func(from, n int) {
		for start := from; start < from+n; start += len(batch) {
			part := batch[:min(len(batch), from+n-start)]
			for k := range part {
				i := start + k
				e := &evs[i%len(evs)]
				part[k] = chat.Event{TS: benchBase + int64(i/len(evs))*period + e.ts, Room: e.room, User: e.user, Text: e.text}
			}
			observe(s, part)
		}
	}
	run(0, warm)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	run(warm, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/event")
	keys := 0
	for _, st := range s.Stats() {
		keys += st.Keys
	}
	b.ReportMetric(float64(keys), "keys")
}

// BenchmarkObserveAdded is what a similar policy and a spike policy each
// add to the default policies on the stream of benchStream (100 rooms,
// 3,000 events a second, nearly every text new), fed by ObserveBatch 64
// at a time as ingest does, side by side with the defaults alone after a
// warm-up of 70 s of events.
func BenchmarkObserveAdded(b *testing.B) {
	for _, p := range []Policy{
		{Name: "copypaste", Scope: ScopeRoom, Algorithm: AlgSimilar, Limit: 10, Window: time.Minute},
		{Name: "surge", Scope: ScopeRoom, Algorithm: AlgSpike, Window: time.Minute, Baseline: time.Hour},
	} {
		b.Run(string(p.Algorithm), func(b *testing.B) {
			const rate = 3000
			evs := benchStream(1<<18, rate)
			period := int64(len(evs)) * 1000 / rate
			var batch [64]chat.Event
			sideBySide(b, 210_000, mustSet(b, DefaultPolicies()), mustSet(b, append(DefaultPolicies(), p)), "with", func(s *Set, from, to int) {
				for start := from; start < to; start += len(batch) {
					part := batch[:min(len(batch), to-start)]
					for k := range part {
						i := start + k
						e := &evs[i%len(evs)]
						part[k] = chat.Event{TS: benchBase + int64(i/len(evs))*period + e.ts, Room: e.room, User: e.user, Text: e.text}
					}
					s.ObserveBatch(part, func(int, Alert) {}, nil)
				}
			})
		})
	}
}

// sideBySide feeds two Sets the same events, by run, first a warm-up of
// warm events each, then b.N in alternating chunks of 4,096, and reports
// each one's CPU time per event (the process's, garbage collection
// included: on a shared machine it varies less than the wall clock), the
// second's as name-cpu-ns/event, and the difference: what the policies of
// with add to those of without.
func sideBySide(b *testing.B, warm int, without, with *Set, name string, run func(s *Set, from, to int)) {
	timed := func(s *Set, from, to int) time.Duration {
		t0 := cpuTime()
		run(s, from, to)
		return cpuTime() - t0
	}
	timed(without, 0, warm)
	timed(with, 0, warm)
	var tWith, tWithout time.Duration
	b.ResetTimer()
	for start, n := warm, 0; start < warm+b.N; start, n = start+4096, n+1 {
		end := min(start+4096, warm+b.N)
		if n%2 == 0 {
			tWith += timed(with, start, end)
			tWithout += timed(without, start, end)
		} else {
			tWithout += timed(without, start, end)
			tWith += timed(with, start, end)
		}
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(tWithout), "default-cpu-ns/event")
	b.ReportMetric(per(tWith), name+"-cpu-ns/event")
	b.ReportMetric(per(tWith)-per(tWithout), "added-cpu-ns/event")
}
