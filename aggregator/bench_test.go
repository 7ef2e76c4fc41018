package aggregator_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// The benchmark trace: 1,000 rooms and 100,000 users, one event per
// simulated millisecond (1,000 events/s of chat time), so the 1h window
// holds 3.6 million events in steady state. Users are Zipf-skewed; each
// belongs to one to three rooms, drawn Zipf-skewed too (people talk in a
// few rooms, not in every room), and talks in one of them at random.
const (
	benchRooms = 1_000
	benchUsers = 100_000
	benchTrace = 1 << 22
	// readEvery is how often the benchmark reads an overview (top 10 users
	// and rooms of the first window): about 100 reads a second at 1M
	// events/s, a few dashboards and moderation bots.
	readEvery = 10_000
)

var (
	traceOnce sync.Once
	trace     []chat.Event
)

func benchTraceEvents() []chat.Event {
	traceOnce.Do(func() {
		r := rand.New(rand.NewPCG(42, 42))
		zr := rand.NewZipf(r, 1.2, 1, benchRooms-1)
		zu := rand.NewZipf(r, 1.1, 1, benchUsers-1)
		rooms := make([]string, benchRooms)
		for i := range rooms {
			rooms[i] = fmt.Sprintf("room-%04d", i)
		}
		users := make([]string, benchUsers)
		member := make([][]string, benchUsers)
		for i := range users {
			users[i] = fmt.Sprintf("user-%06d", i)
			for range 1 + r.IntN(3) {
				member[i] = append(member[i], rooms[zr.Uint64()])
			}
		}
		// Each event owns its strings, laid out one after another like the
		// payloads that ingest decodes in place, not shared with other events.
		trace = make([]chat.Event, benchTrace)
		arena := make([]byte, 0, benchTrace*24)
		for i := range trace {
			u := zu.Uint64()
			room, user := member[u][r.IntN(len(member[u]))], users[u]
			at := len(arena)
			arena = append(arena, room...)
			arena = append(arena, user...)
			trace[i] = chat.Event{Room: unsafe.String(&arena[at], len(room)), User: unsafe.String(&arena[at+len(room)], len(user))}
		}
	})
	return trace
}

// observer is what the benchmark drives: chatpulse's aggregator or the
// naive baseline.
type observer interface {
	observe(now int64, evs []chat.Event)
	topTalker(now int64) string
}

type fast struct{ a *aggregator.Aggregator }

func (f fast) observe(now int64, evs []chat.Event) { f.a.Observe(now, evs, nil) }
func (f fast) topTalker(now int64) string {
	v, _ := f.a.Overview("", 10, now)
	if v.TopTalker == nil {
		return ""
	}
	return v.TopTalker.User
}

// feed plays the trace from event index from, count events, in batches of
// 64 (as ingest does), with an overview read every readEvery events.
func feed(o observer, start int64, from, count int) {
	tr := benchTraceEvents()
	batch := make([]chat.Event, 0, 64)
	for i := from; i < from+count; i++ {
		e := tr[i%len(tr)]
		e.TS = start + int64(i)
		batch = append(batch, e)
		if len(batch) == cap(batch) {
			o.observe(e.TS, batch)
			batch = batch[:0]
		}
		if i%readEvery == 0 {
			o.topTalker(e.TS)
		}
	}
	if len(batch) > 0 {
		o.observe(start+int64(from+count), batch)
	}
}

const benchStart = 1_764_000_000_000

// What the chatpulse run measured, for the naive run's ratios: wall time
// and CPU time per event. On a shared machine the CPU time (both cores,
// the GC included) is the steadier of the two.
var lastFastNs, lastFastCPU float64

// cpuTime is the CPU time the process has used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkObserve measures ingest with the default windows in steady state
// (a full hour of traffic already in), against the naive baseline on the
// same trace. The naive run reports how many times slower it is.
func BenchmarkObserve(b *testing.B) {
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	warm := benchWarm(ws)
	b.Run("chatpulse", func(b *testing.B) {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		a, _ := aggregator.New(ws)
		feed(fast{a}, benchStart, 0, warm)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		st := a.Stats()
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuTime()
		feed(fast{a}, benchStart, warm, b.N)
		cpu = cpuTime() - cpu
		b.StopTimer()
		lastFastNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		lastFastCPU = float64(cpu.Nanoseconds()) / float64(b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(lastFastCPU, "cpu-ns/event")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(st.Pairs*len(ws)), "B/pair/window")
		b.ReportMetric(float64(st.Pairs), "pairs")
		runtime.KeepAlive(a)
	})
	b.Run("naive", func(b *testing.B) {
		n := newNaive(ws)
		feed(n, benchStart, 0, warm)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuTime()
		feed(n, benchStart, warm, b.N)
		cpu = cpuTime() - cpu
		b.StopTimer()
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		cpuNs := float64(cpu.Nanoseconds()) / float64(b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(cpuNs, "cpu-ns/event")
		if lastFastNs > 0 {
			b.ReportMetric(ns/lastFastNs, "x_slower_than_chatpulse")
			b.ReportMetric(cpuNs/lastFastCPU, "x_cpu_of_chatpulse")
		}
	})
}

// live100k is an aggregator with 100,000 users and 1,000 rooms live in the
// first window.
func live100k(b *testing.B) (*aggregator.Aggregator, int64) {
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	a, _ := aggregator.New(ws)
	r := rand.New(rand.NewPCG(3, 3))
	z := rand.NewZipf(r, 1.1, 1, benchUsers-1)
	now := int64(benchStart)
	var evs []chat.Event
	for i := range 300_000 {
		u := i
		if i >= benchUsers {
			u = int(z.Uint64())
		}
		evs = append(evs, chat.Event{Room: fmt.Sprintf("room-%04d", r.IntN(benchRooms)), User: fmt.Sprintf("user-%06d", u), TS: now - int64(r.IntN(50_000))})
	}
	a.Observe(now, evs, nil)
	if st := a.Stats(); st.Users != benchUsers {
		b.Fatalf("%d live users", st.Users)
	}
	return a, now
}

// BenchmarkOverviewCold is the first overview of a window nobody has read:
// its rankings are rebuilt from all 100,000 users (see topk). Run it with
// -benchtime 5x or so: each round builds a fresh aggregator.
func BenchmarkOverviewCold(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		a, now := live100k(b)
		b.StartTimer()
		a.Overview("", 10, now)
	}
}

func BenchmarkOverview(b *testing.B) {
	a, now := live100k(b)
	b.ReportAllocs()
	for b.Loop() {
		a.Overview("", 10, now)
	}
}

func BenchmarkRoom(b *testing.B) {
	a, now := live100k(b)
	b.ReportAllocs()
	for b.Loop() {
		a.Room("room-0001", "", 10, now)
	}
}

// BenchmarkRooms is the biggest view: all 1,000 rooms with their top
// talkers, built under the lock, so its time is the longest a read can hold
// up ingest.
func BenchmarkRooms(b *testing.B) {
	a, now := live100k(b)
	b.ReportAllocs()
	for b.Loop() {
		a.Rooms("", 1000, now)
	}
}

// BenchmarkState saves and loads the state of live100k's aggregator
// (100,000 users in 1,000 rooms, the default windows): append is
// AppendState, load is LoadState, again and again into one aggregator
// (LoadState empties it first). Both report bytes per pair.
//
//	go test -run '^$' -bench State ./aggregator/
func BenchmarkState(b *testing.B) {
	a, _ := live100k(b)
	saved := a.AppendState(nil)
	pairs := float64(a.Stats().Pairs)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			saved = a.AppendState(saved[:0])
		}
		b.ReportMetric(float64(len(saved))/pairs, "bytes/pair")
	})
	b.Run("load", func(b *testing.B) {
		ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
		fresh, _ := aggregator.New(ws)
		b.ReportAllocs()
		for b.Loop() {
			if err := fresh.LoadState(saved); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(saved))/pairs, "bytes/pair")
	})
}

// naive is the baseline the background notes warn against: a deque of
// timestamps per key and window, and a sort of all users for a top talker.
type naive struct {
	ws []naiveWindow
}

type naiveWindow struct {
	size  int64
	total []int64
	rooms map[string]*[]int64
	users map[string]*[]int64
	pairs map[[2]string]*[]int64
}

func newNaive(ws []rolling.Window) *naive {
	n := &naive{}
	for _, w := range ws {
		n.ws = append(n.ws, naiveWindow{size: w.Size.Milliseconds(), rooms: map[string]*[]int64{}, users: map[string]*[]int64{}, pairs: map[[2]string]*[]int64{}})
	}
	return n
}

func expire(q *[]int64, now, size int64) {
	i := 0
	for i < len(*q) && (*q)[i] <= now-size {
		i++
	}
	*q = (*q)[i:]
}

func push[K comparable](m map[K]*[]int64, k K, ts, size int64) {
	q := m[k]
	if q == nil {
		q = new([]int64)
		m[k] = q
	}
	expire(q, ts, size)
	*q = append(*q, ts)
}

func (n *naive) observe(now int64, evs []chat.Event) {
	for _, e := range evs {
		for i := range n.ws {
			w := &n.ws[i]
			expire(&w.total, e.TS, w.size)
			w.total = append(w.total, e.TS)
			push(w.rooms, strings.Clone(e.Room), e.TS, w.size)
			push(w.users, strings.Clone(e.User), e.TS, w.size)
			push(w.pairs, [2]string{e.Room, e.User}, e.TS, w.size)
		}
	}
}

func (n *naive) topTalker(now int64) string {
	w := &n.ws[0]
	type uc struct {
		user string
		n    int
	}
	var all []uc
	for u, q := range w.users {
		expire(q, now, w.size)
		if len(*q) == 0 {
			delete(w.users, u)
			continue
		}
		all = append(all, uc{u, len(*q)})
	}
	slices.SortFunc(all, func(a, b uc) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.user, b.user)
	})
	if len(all) == 0 {
		return ""
	}
	return all[0].user
}

var warmMs = flag.Int64("warm", 0, "warm-up events (default: the largest window plus a second)")

func benchWarm(ws []rolling.Window) int {
	if *warmMs > 0 {
		return int(*warmMs)
	}
	return int(ws[len(ws)-1].Size.Milliseconds()) + 1000
}

// BenchmarkLoadState is issue 34's restart at the aggregator alone: a
// million users, each talking in two of 800 rooms (two million pairs),
// windows 1m,1h,7d:1h, as the engine's BenchmarkSnapshotPause holds them.
// encode-ms is AppendState, load-ms LoadState into a fresh aggregator
// with the saved one gone and the collector held, as at a restart, each
// once a round.
//
//	go test -run '^$' -bench LoadState -benchtime 3x ./aggregator/
func BenchmarkLoadState(b *testing.B) {
	const users = 1_000_000
	ws, _ := rolling.ParseWindows("1m,1h,7d:1h")
	a, _ := aggregator.New(ws)
	now := int64(benchStart)
	batch := make([]chat.Event, 0, 1024)
	for u := range users {
		for j := range 2 {
			batch = append(batch, chat.Event{Room: fmt.Sprintf("room-%03d", (u+j*401)%800), User: fmt.Sprintf("user-%07d", u), TS: now - int64(u%3_000_000)})
		}
		if len(batch) >= 1000 {
			a.Observe(now, batch, nil)
			batch = batch[:0]
		}
	}
	a.Observe(now, batch, nil)
	pairs := a.Stats().Pairs
	var saved []byte
	var encode, load time.Duration
	b.ReportAllocs()
	for b.Loop() {
		runtime.GC()
		start := time.Now()
		saved = a.AppendState(saved[:0])
		encode += time.Since(start)
		// A restart loads into an empty heap: the next round encodes
		// what this one loaded, which is the same state.
		a, _ = aggregator.New(ws)
		runtime.GC()
		percent := debug.SetGCPercent(-1) // as engine's Stage.load holds the collector
		start = time.Now()
		if err := a.LoadState(saved); err != nil {
			b.Fatal(err)
		}
		load += time.Since(start)
		debug.SetGCPercent(percent)
	}
	b.ReportMetric(float64(encode.Milliseconds())/float64(b.N), "encode-ms")
	b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load-ms")
	b.ReportMetric(float64(len(saved))/float64(pairs), "bytes/pair")
	b.ReportMetric(float64(pairs), "pairs")
}
