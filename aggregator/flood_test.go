package aggregator_test

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// A key flood (issue 12): users events from as many new users over rooms
// rooms, spread evenly over seconds of chat time, while a small steady load
// (steadyUsers users in a few rooms, 100 events a second) goes on before,
// during and after it. Time is explicit; the janitor's Advance every 5 s
// is the only other call, and nothing reads a view.
type flood struct {
	users, rooms int
	start, secs  int64  // when the flood starts and how long it lasts, in s
	end          int64  // when the run ends, in s
	sample       func() // called every second of chat time
}

const (
	floodT0     = 1_764_000_000_000
	steadyUsers = 100
)

func (f flood) run(a *aggregator.Aggregator) {
	batch := make([]chat.Event, 0, 64)
	send := func(now int64, e chat.Event) {
		batch = append(batch, e)
		if len(batch) == cap(batch) {
			a.Observe(now, batch, nil)
			batch = batch[:0]
		}
	}
	next := 0 // the next flooding user
	var name []byte
	for s := int64(0); s < f.end; s++ {
		for ms := int64(0); ms < 1000; ms += 10 {
			now := floodT0 + s*1000 + ms
			u := int(now/10) % steadyUsers
			send(now, chat.Event{Room: fmt.Sprint("steady-", u%7), User: fmt.Sprint("regular-", u), TS: now})
			if s < f.start || s >= f.start+f.secs {
				continue
			}
			// this 10 ms slice's share of the flood
			upto := int(int64(f.users) * ((s-f.start)*1000 + ms + 10) / (f.secs * 1000))
			for ; next < upto; next++ {
				name = fmt.Appendf(name[:0], "flood-%07d", next)
				room := fmt.Sprintf("r-%06d", next%f.rooms)
				send(now, chat.Event{Room: room, User: string(name), TS: now})
			}
		}
		if len(batch) > 0 {
			a.Observe(floodT0+s*1000+999, batch, nil)
			batch = batch[:0]
		}
		if s%5 == 4 {
			a.Advance(floodT0 + s*1000 + 999) // the janitor
		}
		if f.sample != nil {
			f.sample()
		}
	}
}

// heap reads, after a full collection, the bytes of live objects and the
// bytes of heap spans in use (live objects plus the free space in their
// spans: what the process keeps of the heap).
func heap() (live, inUse uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[0].Value.Uint64() + s[1].Value.Uint64()
}

// After a flood of 200,000 new users has left a 10 s window, and with no
// view read, the process's heap in use is within twice what it is with an
// aggregator that only saw the steady load, and so are the aggregator's
// own live bytes: forgotten keys are forgotten, heap entries, map and
// slot capacity included.
func TestFloodGivesMemoryBack(t *testing.T) {
	ws := mustWindows(t, "10s")
	users := 200_000
	if testing.Short() {
		users = 50_000
	}
	_, base := heap()
	run := func(f flood) (live, inUse uint64, st aggregator.Stats) {
		live0, _ := heap()
		a, _ := aggregator.New(ws)
		f.run(a)
		live, inUse = heap()
		st = a.Stats()
		runtime.KeepAlive(a)
		return live - min(live, live0), inUse, st
	}
	freshLive, fresh, _ := run(flood{end: 40})
	afterLive, after, st := run(flood{users: users, rooms: users / 20, start: 10, secs: 10, end: 40})
	t.Logf("heap in use: %d KiB before, %d KiB with a fresh aggregator, %d KiB with the flooded one; the aggregator's live bytes: %d KiB fresh, %d KiB after the flood",
		base>>10, fresh>>10, after>>10, freshLive>>10, afterLive>>10)
	if st.Users != steadyUsers || st.Pairs != steadyUsers {
		t.Fatalf("%d users and %d pairs tracked after the flood, want the %d steady ones", st.Users, st.Pairs, steadyUsers)
	}
	if after > 2*fresh {
		t.Errorf("heap in use after the flood: %d KiB, more than twice the %d KiB with a fresh aggregator", after>>10, fresh>>10)
	}
	if afterLive > 2*freshLive {
		t.Errorf("the aggregator keeps %d KiB after the flood, more than twice the %d KiB of a fresh one", afterLive>>10, freshLive>>10)
	}
}

// BenchmarkFlood is issue 12's flood at full size: 2,000,000 new users over
// 100,000 rooms in 60 s of chat time, with a 10 s window, then 30 s of the
// steady load alone. It reports the heap in use at its peak (sampled every
// second of chat time, garbage included), the live bytes per tracked
// (room, user) pair per window at the end of the flood, and the heap in use
// once the flood has left the window, against a fresh process's: once with
// no reads (a deployment used only for throttling), once with a dashboard
// reading the overview and the busiest 50 rooms every second. Run it with
// -benchtime 1x.
func BenchmarkFlood(b *testing.B) {
	for _, read := range []bool{false, true} {
		name := "no-reads"
		if read {
			name = "dashboard"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				floodOnce(b, read)
			}
		})
	}
}

func floodOnce(b *testing.B, read bool) {
	ws, _ := rolling.ParseWindows("10s")
	_, base := heap()
	a, _ := aggregator.New(ws)
	var peak, liveAtEnd uint64
	var st aggregator.Stats
	f := flood{users: 2_000_000, rooms: 100_000, start: 5, secs: 60, end: 95}
	sec := int64(0)
	f.sample = func() {
		sec++
		if read {
			now := floodT0 + sec*1000
			a.Overview("", 10, now)
			a.Rooms("", 50, now)
		}
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
		metrics.Read(s)
		peak = max(peak, s[0].Value.Uint64()+s[1].Value.Uint64())
		if sec == f.start+f.secs { // the flood's last second
			liveAtEnd, _ = heap()
			st = a.Stats()
		}
	}
	f.run(a)
	live, after := heap()
	runtime.KeepAlive(a)
	b.ReportMetric(float64(base)/(1<<20), "MiB-before")
	b.ReportMetric(float64(peak)/(1<<20), "MiB-peak")
	b.ReportMetric(float64(liveAtEnd)/(1<<20), "MiB-live-at-flood-end")
	b.ReportMetric(float64(st.Pairs), "pairs-at-flood-end")
	b.ReportMetric(float64(liveAtEnd-base)/float64(st.Pairs*len(ws)), "B/pair/window")
	b.ReportMetric(float64(after)/(1<<20), "MiB-after")
	b.ReportMetric(float64(live)/(1<<20), "MiB-live-after")
}
