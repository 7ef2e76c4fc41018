package group

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// split is a group's state held in one process: each event goes to the
// room stage of its room's partition and the user stage of its user's, as
// the stream's subject transform files it.
type split struct {
	n            int
	rooms, users []*aggregator.Aggregator
}

func newSplit(t *testing.T, ws []rolling.Window, n int) *split {
	s := &split{n: n}
	for range n {
		r, err := aggregator.New(ws)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := aggregator.New(ws)
		s.rooms, s.users = append(s.rooms, r), append(s.users, u)
	}
	return s
}

func (s *split) observe(now int64, evs []chat.Event) {
	byRoom, byUser := make([][]chat.Event, s.n), make([][]chat.Event, s.n)
	for _, e := range evs {
		r, u := Partition(chat.Token(e.Room), s.n), Partition(chat.Token(e.User), s.n)
		byRoom[r] = append(byRoom[r], e)
		byUser[u] = append(byUser[u], e)
	}
	for p := range s.n {
		s.rooms[p].Observe(now, byRoom[p], nil)
		s.users[p].Observe(now, byUser[p], nil)
	}
}

// asOf is the latest clock of every partition, read at now.
func (s *split) asOf(win string, now int64) int64 {
	t := now
	for _, a := range append(append([]*aggregator.Aggregator{}, s.rooms...), s.users...) {
		v, _ := a.Overview(win, 1, now)
		t = max(t, int64(v.AsOf))
	}
	return t
}

func (s *split) overview(win string, k int, t int64, seconds float64) aggregator.Overview {
	var rooms, users []aggregator.Overview
	for p := range s.n {
		r, _ := s.rooms[p].Overview(win, k, t)
		u, _ := s.users[p].Overview(win, k, t)
		rooms, users = append(rooms, r), append(users, u)
	}
	return mergeOverview(rooms, users, k, seconds)
}

func (s *split) roomsList(win string, limit int, t int64) aggregator.Rooms {
	var parts []aggregator.Rooms
	for p := range s.n {
		r, _ := s.rooms[p].Rooms(win, limit, t)
		parts = append(parts, r)
	}
	return mergeRooms(parts, limit)
}

func jsonOf(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every view merged from the partitions equals the one aggregator fed
// everything, on random traces with late events, events ahead of the
// clock, gaps longer than every window, ties, names that need escaping,
// and joins and leaves among the messages.
func TestMergeEqualsOneAggregator(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			ws, _ := rolling.ParseWindows("10s,1m:5s,5m")
			one, _ := aggregator.New(ws)
			n := []int{1, 3, 8, 64}[seed%4]
			s := newSplit(t, ws, n)
			rooms := []string{"lobby", "dot.room", "space room", "pct%room", "a/b", "é"}
			users := []string{"alice", "bob", "a.b", "carol", "dave", "eve", "x y", "z"}
			for range 8 {
				rooms = append(rooms, fmt.Sprintf("r%d", r.IntN(1000)))
			}
			for range 40 {
				users = append(users, fmt.Sprintf("u%d", r.IntN(1000)))
			}
			pick := func(names []string) string {
				return names[min(len(names)-1, int(r.ExpFloat64()*float64(len(names))/4))]
			}
			now := int64(1_764_000_000_000)
			for step := range 300 {
				switch x := r.IntN(100); {
				case x < 80:
					now += r.Int64N(900)
				case x < 84:
					now += 6 * 60_000 // past every window
				default:
					now -= r.Int64N(3000) // the wall clock steps back
				}
				evs := make([]chat.Event, r.IntN(12))
				for i := range evs {
					ts := now - r.Int64N(400_000) // some late for one window, some for all
					if r.IntN(8) == 0 {
						ts = now + r.Int64N(4000) // ahead of the clock
					}
					evs[i] = chat.Event{Room: pick(rooms), User: pick(users), TS: ts, Kind: []chat.Kind{chat.KindMessage, chat.KindJoin, chat.KindLeave}[max(0, r.IntN(8)-5)]}
				}
				one.Observe(now, slices.Clone(evs), nil) // it marks the repeated joins and leaves
				s.observe(now, evs)
				if step%10 != 9 {
					continue
				}
				for _, w := range ws {
					win := w.Name
					tAll := max(s.asOf(win, now), func() int64 { v, _ := one.Overview(win, 1, now); return int64(v.AsOf) }())
					for _, k := range []int{1, 3, 100} {
						want, _ := one.Overview(win, k, tAll)
						if got := s.overview(win, k, tAll, w.Size.Seconds()); jsonOf(t, got) != jsonOf(t, want) {
							t.Fatalf("step %d overview %s k=%d:\n got %s\nwant %s", step, win, k, jsonOf(t, got), jsonOf(t, want))
						}
					}
					for _, limit := range []int{2, 1000} {
						want, _ := one.Rooms(win, limit, tAll)
						if got := s.roomsList(win, limit, tAll); jsonOf(t, got) != jsonOf(t, want) {
							t.Fatalf("step %d rooms %s limit=%d:\n got %s\nwant %s", step, win, limit, jsonOf(t, got), jsonOf(t, want))
						}
					}
					for _, room := range rooms {
						want, _ := one.Room(room, win, 5, tAll)
						got, _ := s.rooms[Partition(chat.Token(room), n)].Room(room, win, 5, tAll)
						if jsonOf(t, got) != jsonOf(t, want) {
							t.Fatalf("step %d room %q %s:\n got %s\nwant %s", step, room, win, jsonOf(t, got), jsonOf(t, want))
						}
					}
					for _, user := range users {
						want, _ := one.User(user, win, tAll)
						got, _ := s.users[Partition(chat.Token(user), n)].User(user, win, tAll)
						if jsonOf(t, got) != jsonOf(t, want) {
							t.Fatalf("step %d user %q %s:\n got %s\nwant %s", step, user, win, jsonOf(t, got), jsonOf(t, want))
						}
					}
				}
			}
		})
	}
}

// A view's parts are merged at the latest as_of among them, but never
// later than the limit (the group's clock plus --max-skew): the parts of
// a member whose clock runs further ahead are missing, those behind are
// asked again.
func TestAlignAsOf(t *testing.T) {
	a := func(asOf int64, parts ...int) answer { return answer{Parts: parts, AsOf: asOf} }
	cases := []struct {
		name    string
		answers []answer
		now     int64
		limit   int64
		t       int64
		kept    int
		again   []int
		over    int
	}{
		{name: "all at now", answers: []answer{a(100, 0), a(100, 1)}, now: 100, limit: 105, t: 100, kept: 2},
		{name: "one ahead, within the limit: the others again", answers: []answer{a(100, 0), a(104, 1, 2)}, now: 100, limit: 105, t: 104, kept: 2, again: []int{0}},
		{name: "one ahead past the limit: missing, the others at now", answers: []answer{a(100, 0), a(110, 1, 2)}, now: 100, limit: 105, t: 100, kept: 1, over: 2},
		{name: "one at the limit, one past it", answers: []answer{a(100, 0), a(105, 1), a(110, 2)}, now: 100, limit: 105, t: 105, kept: 2, again: []int{0}, over: 1},
		{name: "an answer of no parts neither moves nor goes", answers: []answer{a(100, 0), a(200)}, now: 100, limit: 105, t: 100, kept: 2},
		{name: "the asker's own clock past the limit", answers: []answer{a(110, 0), a(100, 1)}, now: 110, limit: 105, t: 105, kept: 1, again: []int{1}, over: 1},
	}
	for _, c := range cases {
		tt, kept, again, over := alignAsOf(c.answers, c.now, c.limit)
		if tt != c.t || len(kept) != c.kept || !slices.Equal(again, c.again) || over != c.over {
			t.Errorf("%s: t %d, kept %d, again %v, over %d; want %d, %d, %v, %d", c.name, tt, len(kept), again, over, c.t, c.kept, c.again, c.over)
		}
	}
}
