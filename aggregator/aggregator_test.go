package aggregator_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

func mustWindows(t testing.TB, s string) []rolling.Window {
	t.Helper()
	ws, err := rolling.ParseWindows(s)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// sim drives an aggregator and the oracle with the same random trace.
type sim struct {
	t     *testing.T
	r     *rand.Rand
	agg   *aggregator.Aggregator
	ora   *oracle.Oracle
	names []string
	now   int64
	rooms []string
	users []string
	seed  uint64
	crowd bool // many users, big batches and pauses: rankings use their floors
	// kinds: about one event in five is a join or a leave (docs/contract.md
	// section 12), which counts apart from the messages. Without it the
	// trace is the one of messages alone that the format 2 golden state
	// was saved from.
	kinds bool
	// reload, when set, now and then replaces the aggregator with a new
	// one that loaded its state (AppendState, LoadState): every answer
	// after must be the same.
	reload bool
	ws     []rolling.Window
	// cow, with reload, writes the state while the trace goes on: between
	// the chunks of users that Finish writes, more steps run on the
	// aggregator being saved; the new one loads the state and observes
	// again the batches since StartState, as a restart reads the stream
	// again after the snapshot's sequence.
	cow     bool
	writing bool
	since   []observed // the batches since StartState
}

type observed struct {
	now   int64
	batch []chat.Event // nil: a read at now
}

func newSim(t *testing.T, seed uint64, windows string) *sim {
	ws := mustWindows(t, windows)
	agg, err := aggregator.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	s := &sim{t: t, r: r, agg: agg, ora: oracle.New(ws), names: agg.WindowNames(), seed: seed, ws: ws,
		now: 1_764_000_000_000 + int64(r.IntN(100_000)), kinds: true}
	for i := range 1 + r.IntN(8) {
		s.rooms = append(s.rooms, fmt.Sprintf("room-%d", i))
	}
	s.rooms = append(s.rooms, "a/b", "é") // names that need escaping elsewhere
	for i := range 2 + r.IntN(30) {
		s.users = append(s.users, fmt.Sprintf("u%02d", i))
	}
	return s
}

// skewed picks low indexes more often, so that some keys dominate and
// ties among the tail are common.
func (s *sim) skewed(n int) int {
	return min(n-1, int(s.r.ExpFloat64()*float64(n)/4))
}

func (s *sim) event(maxLate int64) chat.Event {
	ts := s.now - s.r.Int64N(maxLate+1)
	if s.r.IntN(10) == 0 {
		ts = s.now + s.r.Int64N(3000) // a little ahead of the wall clock
	}
	ev := chat.Event{Room: s.rooms[s.skewed(len(s.rooms))], User: s.users[s.skewed(len(s.users))], TS: ts}
	if s.kinds {
		switch s.r.IntN(10) {
		case 0:
			// A join by anyone, most often a user who never talks: joins
			// must not make talkers or distinct users.
			ev.Kind = chat.KindJoin
			if s.r.IntN(3) > 0 {
				ev.User = fmt.Sprintf("new%d", s.r.IntN(50))
			}
		case 1:
			// A leave, of those users too half the time: joins, repeats
			// and leaves of one member in turn (docs/contract.md section
			// 12).
			ev.Kind = chat.KindLeave
			if s.r.IntN(2) > 0 {
				ev.User = fmt.Sprintf("new%d", s.r.IntN(50))
			}
		}
	}
	return ev
}

func (s *sim) step(i int) {
	if s.reload && !s.writing && s.r.IntN(40) == 0 {
		s.restart(i)
	}
	switch p := s.r.IntN(100); {
	case s.crowd && p >= 78 && p < 81: // a pause: most of the largest window expires
		s.now += 40_000 + s.r.Int64N(15_000)
	case p < 70: // time passes a little
		s.now += s.r.Int64N(700)
	case p < 75: // a gap longer than every window
		s.now += 10*60_000 + s.r.Int64N(100_000)
	case p < 78: // the wall clock steps back
		s.now -= s.r.Int64N(5000)
	}
	if s.r.IntN(3) > 0 {
		batch := make([]chat.Event, 1+s.r.IntN(6))
		if s.crowd {
			batch = make([]chat.Event, 1+s.r.IntN(200))
		}
		maxLate := []int64{0, 2_000, 30_000, 400_000}[s.r.IntN(4)]
		for j := range batch {
			batch[j] = s.event(maxLate)
		}
		if s.writing {
			s.since = append(s.since, observed{s.now, slices.Clone(batch)})
		}
		got := s.agg.Observe(s.now, slices.Clone(batch), nil)
		want := s.ora.Observe(s.now, batch)
		if !slices.Equal(got, want) {
			s.t.Fatalf("seed %d step %d: late = %v, want %v", s.seed, i, got, want)
		}
		return
	}
	if s.writing { // a read moves the clock too, as the stream read again will
		s.since = append(s.since, observed{now: s.now})
	}
	w := s.names[s.r.IntN(len(s.names))]
	k := 1 + s.r.IntN(5)
	switch s.r.IntN(5) {
	case 0:
		got, _ := s.agg.Overview(w, k, s.now)
		s.same(i, "overview", got, s.ora.Overview(w, k, s.now))
	case 1:
		got, _ := s.agg.Rooms(w, k, s.now)
		s.same(i, "rooms", got, s.ora.Rooms(w, k, s.now))
	case 2:
		room := s.rooms[s.r.IntN(len(s.rooms))]
		got, _ := s.agg.Room(room, w, k, s.now)
		s.same(i, "room "+room, got, s.ora.Room(room, w, k, s.now))
	case 3:
		user := s.users[s.r.IntN(len(s.users))]
		got, _ := s.agg.User(user, w, s.now)
		s.same(i, "user "+user, got, s.ora.User(user, w, s.now))
	case 4: // everything that expired is forgotten
		s.agg.Advance(s.now)
		st := s.agg.Stats()
		rooms, users, crowds := s.ora.Tracked(s.now)
		if st.Rooms != rooms || st.Users != users || st.Crowds != crowds {
			s.t.Fatalf("seed %d step %d: tracking %d rooms, %d users, %d with joins or leaves; want %d, %d, %d",
				s.seed, i, st.Rooms, st.Users, st.Crowds, rooms, users, crowds)
		}
		if least, most := s.ora.Members(s.now); st.Members < least || st.Members > most {
			s.t.Fatalf("seed %d step %d: %d memberships remembered, want %d to %d", s.seed, i, st.Members, least, most)
		}
	}
}

// restart replaces the aggregator with a new one that loaded its state.
func (s *sim) restart(i int) {
	fresh, _ := aggregator.New(s.ws)
	if !s.cow {
		if err := fresh.LoadState(s.agg.AppendState(nil)); err != nil {
			s.t.Fatalf("seed %d step %d: %v", s.seed, i, err)
		}
		s.agg = fresh
		return
	}
	s.writing, s.since = true, nil
	sw := s.agg.StartState()
	aggregator.SetStateChunk(s.t, 1+s.r.IntN(4), func() {
		for range s.r.IntN(4) {
			s.step(i)
		}
	})
	state, err := sw.Finish()
	s.writing = false
	if err != nil {
		s.t.Fatalf("seed %d step %d: %v", s.seed, i, err)
	}
	if err := fresh.LoadState(state); err != nil {
		s.t.Fatalf("seed %d step %d: %v", s.seed, i, err)
	}
	for _, o := range s.since {
		if o.batch == nil {
			fresh.Advance(o.now)
		} else {
			fresh.Observe(o.now, o.batch, nil)
		}
	}
	s.agg = fresh
}

func (s *sim) same(i int, what string, got, want any) {
	s.t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		s.t.Fatalf("seed %d step %d: %s\n got %s\nwant %s", s.seed, i, what, g, w)
	}
}

func TestOracle(t *testing.T) {
	for _, windows := range []string{"5s:1s,12s:3s,1m", "1m,5m,1h", "10s:2s"} {
		t.Run(windows, func(t *testing.T) {
			var decided struct{ Repeats, Changes, Forgotten int }
			for seed := range uint64(60) {
				s := newSim(t, seed, windows)
				for i := range 600 {
					s.step(i)
				}
				d := s.ora.Decided
				decided.Repeats, decided.Changes, decided.Forgotten = decided.Repeats+d.Repeats, decided.Changes+d.Changes, decided.Forgotten+d.Forgotten
			}
			// The traces have joins and leaves of every sort
			// (docs/contract.md section 12).
			if decided.Repeats < 100 || decided.Changes < 100 || decided.Forgotten < 100 {
				t.Errorf("the traces' joins and leaves: %+v", decided)
			}
		})
	}
}

// A state saved and loaded into a new aggregator answers every view, and
// counts every later event, as the one it was saved from would have:
// checked against the oracle on random traces with reloads between steps.
func TestStateRoundTrip(t *testing.T) {
	for _, windows := range []string{"5s:1s,12s:3s,1m", "1m,5m,1h", "10s:2s", "1s,2s,3s,4s,5s"} {
		t.Run(windows, func(t *testing.T) {
			for seed := range uint64(30) {
				s := newSim(t, seed, windows)
				s.reload = true
				for i := range 600 {
					s.step(i)
				}
			}
		})
	}
}

// A state written while events go on (copy-on-write, between the chunks
// of users that Finish writes) is the state at StartState: loaded, with
// the batches since then observed again, it answers as the oracle.
func TestStateWrittenWhileObserving(t *testing.T) {
	for _, windows := range []string{"5s:1s,12s:3s,1m", "1m,5m,1h", "10s:2s"} {
		t.Run(windows, func(t *testing.T) {
			for seed := range uint64(20) {
				s := newSim(t, seed, windows)
				s.reload, s.cow = true, true
				for i := range 600 {
					s.step(i)
				}
			}
		})
	}
	crowdReloads(t, true)
}

func TestStateRoundTripCrowd(t *testing.T) { crowdReloads(t, false) }

// crowdReloads runs a crowd's trace (3,000 users, big batches, pauses)
// with reloads, written copy-on-write if cow.
func crowdReloads(t *testing.T, cow bool) {
	s := newCrowd(t, 7)
	s.reload, s.cow = true, cow
	for i := range 2000 {
		s.step(i)
	}
}

// newCrowd is a sim of 3,000 users, too many for the rankings to keep them
// all above their floors.
func newCrowd(t *testing.T, seed uint64) *sim {
	s := newSim(t, seed, "5s:1s,1m")
	s.crowd = true
	s.users = s.users[:0]
	for i := range 3000 {
		s.users = append(s.users, fmt.Sprintf("u%04d", i))
	}
	return s
}

// LoadState refuses a state of other windows, of another version, cut
// short, with bytes after it or with a number written longer than it
// takes, saying why, and leaves the aggregator empty.
func TestLoadStateRefuses(t *testing.T) {
	s := newSim(t, 5, "1m,5m,1h")
	for i := range 300 {
		s.step(i)
	}
	saved := s.agg.AppendState(nil)
	overlong := append([]byte{saved[0], saved[1] | 0x80, 0}, saved[2:]...) // the windows' count
	cases := []struct {
		name    string
		windows string
		state   []byte
		want    string
	}{
		{"windows", "1m,5m", saved, "3 windows, not 2"},
		{"window", "1m,5m,2h", saved, `window "1h" of 60 buckets of 60000 ms, not "2h" of 60 of 120000`},
		{"version", "1m,5m,1h", append([]byte{9}, saved[1:]...), "format version 9, not 4 (or 3, 2)"},
		{"empty", "1m,5m,1h", nil, "truncated: 1 byte wanted, 0 left"},
		{"truncated", "1m,5m,1h", saved[:len(saved)-1], "truncated: "},
		{"trailing", "1m,5m,1h", append(slices.Clip(saved), 0), "1 bytes after the last user"},
		{"overlong", "1m,5m,1h", overlong, "an overlong number: 3 in 2 bytes"},
	}
	for _, c := range cases {
		a, _ := aggregator.New(mustWindows(t, c.windows))
		a.Observe(s.now, []chat.Event{{Room: "r", User: "before", TS: s.now}}, nil)
		err := a.LoadState(c.state)
		if err == nil || !strings.HasPrefix(err.Error(), "aggregator: loading a state: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		if st := a.Stats(); st.Rooms != 0 || st.Users != 0 || st.Pairs != 0 {
			t.Errorf("%s: not left empty: %+v", c.name, st)
		}
	}
}

// FuzzLoadState: no input crashes LoadState or loads a state that does
// not hold together: a state it accepts is saved and loaded again alike,
// and its views can be read.
func FuzzLoadState(f *testing.F) {
	ws, _ := rolling.ParseWindows("5s:1s,1m")
	for seed := range uint64(4) {
		s := newSim(&testing.T{}, seed, "5s:1s,1m")
		for i := range 200 {
			s.step(i)
		}
		f.Add(s.agg.AppendState(nil))
	}
	empty, _ := aggregator.New(ws)
	f.Add(empty.AppendState(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, _ := aggregator.New(ws)
		if err := a.LoadState(b); err != nil {
			if st := a.Stats(); st.Rooms != 0 || st.Users != 0 || st.Pairs != 0 {
				t.Fatalf("refused (%v), yet holds %+v", err, st)
			}
			return
		}
		again, _ := aggregator.New(ws)
		if err := again.LoadState(a.AppendState(nil)); err != nil {
			t.Fatalf("a state it accepted, saved again, is refused: %v", err)
		}
		for _, w := range []string{"5s", "1m"} {
			v1, err1 := a.Overview(w, 100, 0)
			v2, err2 := again.Overview(w, 100, 0)
			if err1 != nil || err2 != nil || !reflect.DeepEqual(v1, v2) {
				t.Fatalf("overview %s: %v %v\n%+v\n%+v", w, err1, err2, v1, v2)
			}
		}
	})
}

// With thousands of users the rankings keep only the busiest above their
// floors, and reads after a pause have to rebuild them.
func TestOracleCrowd(t *testing.T) {
	for seed := range uint64(2) {
		s := newCrowd(t, seed)
		for i := range 3000 {
			s.step(i)
		}
	}
}

// FuzzOracle runs random Observe/read sequences drawn from the fuzzer's seed
// and compares every answer with the oracle.
func FuzzOracle(f *testing.F) {
	f.Add(uint64(1), uint16(300), "5s:1s,12s:3s")
	f.Add(uint64(2), uint16(500), "1m,5m,1h")
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16, windows string) {
		if _, err := rolling.ParseWindows(windows); err != nil {
			return
		}
		s := newSim(t, seed, windows)
		for i := range int(steps % 1000) {
			s.step(i)
		}
	})
}

func TestUnknownWindow(t *testing.T) {
	agg, _ := aggregator.New(mustWindows(t, "1m,5m"))
	_, err := agg.Overview("2m", 10, 0)
	if err == nil || err.Error() != `unknown window "2m"; configured: 1m, 5m` {
		t.Fatalf("err = %v", err)
	}
}

// Concurrent ingest and reads, for the race detector; the answers are
// checked against the oracle once everything is in.
func TestConcurrentReads(t *testing.T) {
	ws := mustWindows(t, "1m,5m,1h")
	agg, _ := aggregator.New(ws)
	ora := oracle.New(ws)
	now := int64(1_764_000_000_000)
	var batches [][]chat.Event
	r := rand.New(rand.NewPCG(1, 1))
	for i := range 200 {
		b := make([]chat.Event, 50)
		for j := range b {
			b[j] = chat.Event{Room: fmt.Sprint("r", r.IntN(20)), User: fmt.Sprint("u", r.IntN(200)), TS: now + int64(i*50+j)}
		}
		batches = append(batches, b)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				agg.Overview("", 10, now)
				agg.Rooms("5m", 100, now)
				agg.Room("r1", "1h", 10, now)
				agg.User("u1", "1m", now)
			}
		})
	}
	for _, b := range batches {
		agg.Observe(now, slices.Clone(b), nil)
		ora.Observe(now, b)
	}
	close(stop)
	wg.Wait()
	end := now + 10_000
	for _, w := range []string{"1m", "5m", "1h"} {
		got, _ := agg.Overview(w, 10, end)
		if want := ora.Overview(w, 10, end); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %+v, want %+v", w, got, want)
		}
	}
}

// Counting a message of a (room, user) pair already tracked allocates
// nothing, whatever the windows do meanwhile.
func TestObserveTrackedDoesNotAllocate(t *testing.T) {
	agg, _ := aggregator.New(mustWindows(t, "1m,5m,1h"))
	now := int64(1_764_000_000_000)
	var evs []chat.Event
	for i := range 2000 {
		evs = append(evs, chat.Event{Room: fmt.Sprint("r", i%50), User: fmt.Sprint("u", i%400)})
	}
	batch := make([]chat.Event, 64)
	late := make([]int, 0, 64)
	i := 0
	observe := func() {
		for j := range batch {
			batch[j] = evs[i%len(evs)]
			batch[j].TS = now
			i++
			now += 7 // about 140 events a second of chat time: buckets and heaps keep moving
		}
		late = agg.Observe(now, batch, late[:0])
	}
	for range 20_000 { // a long warm-up: every buffer at its steady size
		observe()
	}
	if a := testing.AllocsPerRun(2000, observe); a != 0 {
		t.Fatalf("%v allocations per batch of 64 tracked events", a)
	}
}
