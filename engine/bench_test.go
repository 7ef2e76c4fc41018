package engine

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// BenchmarkSnapshotPause is what taking a snapshot costs ingest, at
// 100,000 and 1,000,000 tracked users (800 rooms, windows 1m,1h,7d:1h,
// the default policies): the time Save holds the pipeline (the
// aggregator's StartState and the throttle set's CopyState), the time to
// write and encode the rest while a feeder observes batches of ten known
// events every 100µs, the feeder's longest wait for the aggregator
// meanwhile, the size per tracked pair, and the heap before and at the end
// of taking one (the state, the snapshot's bytes and the throttle copy),
// against the state's own heap.
//
//	go test -run '^$' -bench SnapshotPause -benchtime 3x ./engine/
func BenchmarkSnapshotPause(b *testing.B) {
	for _, users := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("users=%d", users), func(b *testing.B) {
			ws, agg, thr, now := pairsHeld(users)
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var pause, encode, load time.Duration
			var size int
			var peak uint64
			var longest time.Duration
			for range b.N {
				runtime.GC() // what a snapshot adds, not earlier ones' garbage
				start := time.Now()
				w := agg.StartState()
				c := thr.CopyState()
				pause += time.Since(start)
				// Meanwhile ingest goes on: a feeder observes small batches
				// of known users (each one written first if it was not
				// yet) and notes its longest wait for the aggregator.
				stop := make(chan struct{})
				fed := make(chan time.Duration)
				go func() {
					var worst time.Duration
					batch := make([]chat.Event, 10)
					for i := 0; ; i++ {
						select {
						case <-stop:
							fed <- worst
							return
						default:
						}
						for j := range batch {
							u := (i*len(batch) + j) * 7919 % users
							batch[j] = chat.Event{Room: fmt.Sprintf("room-%03d", u%800), User: fmt.Sprintf("user-%07d", u), TS: now}
						}
						t := time.Now()
						agg.Observe(now, batch, nil)
						worst = max(worst, time.Since(t))
						time.Sleep(100 * time.Microsecond) // pace: small batches all through the encode, as ingest's
					}
				}()
				start = time.Now()
				a, err := w.Finish()
				if err != nil {
					b.Fatal(err)
				}
				t := c.Append(nil)
				encode += time.Since(start)
				close(stop)
				longest = max(longest, <-fed)
				size = len(a) + len(t)
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapAlloc)
				start = time.Now()
				agg2, _ := aggregator.New(ws)
				thr2, _ := throttle.NewSet(throttle.DefaultPolicies())
				if err := (&Stage{Agg: agg2, Thr: thr2}).load(a, t); err != nil {
					b.Fatal(err)
				}
				load += time.Since(start)
			}
			pairs := agg.Stats().Pairs
			b.ReportMetric(float64(pause.Milliseconds())/float64(b.N), "pause-ms")
			b.ReportMetric(float64(encode.Milliseconds())/float64(b.N), "encode-ms")
			b.ReportMetric(float64(longest.Microseconds())/1000, "longest-wait-ms")
			b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load-ms")
			b.ReportMetric(float64(size)/float64(pairs), "bytes/pair")
			b.ReportMetric(float64(before.HeapAlloc)/(1<<20), "state-MiB")
			b.ReportMetric(float64(peak)/float64(before.HeapAlloc), "peak/state")
		})
	}
}

// pairsHeld is the state of users users, each talking in two of 800 rooms
// (two pairs a user), with windows 1m,1h,7d:1h and the default policies:
// issue 34's shape.
func pairsHeld(users int) ([]rolling.Window, *aggregator.Aggregator, *throttle.Set, int64) {
	ws, _ := rolling.ParseWindows("1m,1h,7d:1h")
	agg, _ := aggregator.New(ws)
	thr, _ := throttle.NewSet(throttle.DefaultPolicies())
	now := time.Now().UnixMilli()
	batch := make([]chat.Event, 0, 1024)
	flush := func() {
		agg.Observe(now, batch, nil)
		thr.ObserveBatch(batch, nil, nil)
		batch = batch[:0]
	}
	for u := range users {
		for j := range 2 {
			batch = append(batch, chat.Event{Room: fmt.Sprintf("room-%03d", (u+j*401)%800), User: fmt.Sprintf("user-%07d", u), TS: now - int64(u%3_000_000), Text: "hello"})
		}
		if len(batch) >= 1000 {
			flush()
		}
	}
	flush()
	return ws, agg, thr, now
}

// held keeps the last BenchmarkHeapPerPair's state alive until the
// benchmark binary exits, so that -memprofile, written then, shows where
// its bytes are.
var held []any

// BenchmarkHeapPerPair is the live heap per tracked (room, user) pair, at
// 200,000 and 2,000,000 pairs of pairsHeld's shape, everything included:
// the aggregator (windows, rankings, users' and rooms' shares) and the
// throttle keys of the default policies. Where the bytes are:
//
//	go test -run '^$' -bench HeapPerPair/pairs=2000000 -benchtime 1x -memprofile mem.out ./engine/
//	go tool pprof -sample_index=inuse_space -top mem.out
func BenchmarkHeapPerPair(b *testing.B) {
	for _, users := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("pairs=%d", 2*users), func(b *testing.B) {
			for range b.N {
				held = nil
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				_, agg, thr, _ := pairsHeld(users)
				runtime.GC()
				runtime.ReadMemStats(&after)
				pairs := agg.Stats().Pairs
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(pairs), "heap-B/pair")
				b.ReportMetric(float64(pairs), "pairs")
				held = []any{agg, thr}
			}
		})
	}
}
