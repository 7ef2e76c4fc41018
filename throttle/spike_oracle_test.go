package throttle

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

// spikeOracle keeps every message of each room and counts by scanning,
// with exact rationals.
type spikeOracle struct {
	n, span, res, window int64
	factor               *big.Rat
	minM, minU           int64
	ids                  bool // a consuming check has come
	rooms                map[string]*oracleRoom
}

type oracleRoom struct {
	posts     []post // bucket, user (its name's hash, any distinct value)
	newest    int64
	marked    bool
	ids       map[string]spikeID
	idsNewest int64 // an id is remembered until one a window newer
}

func newSpikeOracle(p Policy) *spikeOracle {
	p = p.withDefaults()
	f, _ := new(big.Rat).SetString(fmt.Sprint(p.Factor))
	res := p.Resolution.Milliseconds()
	return &spikeOracle{n: p.Window.Milliseconds() / res, span: p.Baseline.Milliseconds() / res, res: res, window: p.Window.Milliseconds(),
		factor: f, minM: int64(p.MinMessages), minU: int64(p.MinUsers), rooms: map[string]*oracleRoom{}}
}

func (o *spikeOracle) room(name string) *oracleRoom {
	r := o.rooms[name]
	if r == nil {
		r = &oracleRoom{newest: chat.Never, ids: map[string]spikeID{}, idsNewest: chat.Never}
		o.rooms[name] = r
	}
	return r
}

func userHash(u string) uint64 { return uint64(len(u))<<32 | uint64(u[len(u)-1]) }

// counts are the window's messages and users and the span's messages at
// bucket T.
func (o *spikeOracle) counts(r *oracleRoom, T int64) spikeCounts {
	var c spikeCounts
	users := map[uint64]bool{}
	for _, p := range r.posts {
		switch {
		case p.b > T-o.n && p.b <= T:
			c.w++
			users[p.user] = true
		case p.b > T-o.span && p.b <= T-o.n:
			c.b++
		}
	}
	c.u = int64(len(users))
	return c
}

// expected is the window's share of the span's rate, times factor.
func (o *spikeOracle) needed(c spikeCounts) *big.Rat {
	x := new(big.Rat).SetFrac64(c.b*o.n, o.span-o.n)
	return x.Mul(x, o.factor)
}

func (o *spikeOracle) over(c spikeCounts) bool {
	return c.w >= o.minM && c.u >= o.minU && new(big.Rat).SetInt64(c.w).Cmp(o.needed(c)) >= 0
}

// limit is the least window count that is over.
func (o *spikeOracle) limit(c spikeCounts) int64 {
	x := o.needed(c)
	q := new(big.Int).Quo(x.Num(), x.Denom()) // x >= 0: floor
	if new(big.Rat).SetInt(q).Cmp(x) < 0 {
		q.Add(q, big.NewInt(1))
	}
	return max(o.minM, q.Int64())
}

// reach moves the room's newest bucket to b, and forgets its mark if it
// holds nothing then.
func (o *spikeOracle) reach(r *oracleRoom, b int64) {
	if r.newest != chat.Never && b <= r.newest {
		return
	}
	r.newest = b
	if c := o.counts(r, b); c.w == 0 && c.b == 0 {
		r.marked = false
	}
}

func (o *spikeOracle) counted(r *oracleRoom, id string, at int64, consumedOnly bool) bool {
	x, ok := r.ids[id]
	return ok && x.at > at-o.window && x.at > r.idsNewest-o.window && (x.consumed || !consumedOnly)
}

func (o *spikeOracle) remember(r *oracleRoom, id string, x spikeID) {
	r.ids[id] = x
	r.idsNewest = max(r.idsNewest, x.at)
}

// observe is an event: counted unless a consuming check counted its id,
// then decided at the room's newest bucket. It returns the alert.
func (o *spikeOracle) observe(room, user, id string, at int64) *Alert {
	r := o.room(room)
	o.reach(r, fdiv(at, o.res))
	if !o.ids || id == "" || !o.counted(r, id, at, true) {
		if b := fdiv(at, o.res); b > r.newest-o.span {
			r.posts = append(r.posts, post{b: b, user: userHash(user)})
		}
		if o.ids && id != "" {
			o.remember(r, id, spikeID{at: at})
		}
	}
	c := o.counts(r, r.newest)
	switch {
	case !o.over(c):
		r.marked = false
	case !r.marked:
		r.marked = true
		return &Alert{Policy: "surge", Room: room, Count: c.w, Limit: o.limit(c), At: chat.Time(at), Event: id, Spike: o.why(c)}
	}
	return nil
}

func (o *spikeOracle) why(c spikeCounts) *Spike {
	w := &Spike{Users: c.u, BaselineMessages: c.b}
	if c.b > 0 {
		e := float64(c.b) * float64(o.n) / float64(o.span-o.n)
		w.Expected, w.Ratio = math.Round(e*1000)/1000, math.Round(float64(c.w)/e*1000)/1000
	}
	return w
}

// take is a consuming check that was recorded.
func (o *spikeOracle) take(room, user, id string, at int64) {
	o.ids = true
	r := o.room(room)
	if o.counted(r, id, at, false) {
		return
	}
	b := fdiv(at, o.res)
	o.reach(r, b)
	if b > r.newest-o.span {
		r.posts = append(r.posts, post{b: b, user: userHash(user)})
	}
	o.remember(r, id, spikeID{at: at, user: userHash(user), consumed: true})
}

// untake takes back a recorded consuming check.
func (o *spikeOracle) untake(room, user, id string) {
	r := o.room(room)
	x, ok := r.ids[id]
	if !ok || !x.consumed || x.user != userHash(user) || x.at <= r.idsNewest-o.window {
		return
	}
	delete(r.ids, id)
	if i := slices.Index(r.posts, post{b: fdiv(x.at, o.res), user: userHash(user)}); i >= 0 {
		r.posts = slices.Delete(r.posts, i, i+1)
	}
}

// holds reports whether the room is over at now.
func (o *spikeOracle) holds(room string, now int64) bool {
	r := o.rooms[room]
	return r != nil && r.newest != chat.Never && o.over(o.counts(r, max(fdiv(now, o.res), r.newest)))
}

// active lists the marked rooms still over at now, by room.
func (o *spikeOracle) active(now int64) []Active {
	out := []Active{}
	for _, name := range slices.Sorted(mapsKeys(o.rooms)) {
		r := o.rooms[name]
		if !r.marked || r.newest == chat.Never {
			continue
		}
		if c := o.counts(r, max(fdiv(now, o.res), r.newest)); o.over(c) {
			out = append(out, Active{Policy: "surge", Room: name, Count: c.w, Limit: o.limit(c), Spike: o.why(c)})
		}
	}
	return out
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// spikeTrace drives a Set and the oracle through random events: four rooms
// of few users, late events (up to 15s, more than the window, less than
// the baseline), gaps of 200s (longer than the baseline and the lateness
// together, so that a room forgotten at rest is never written to in a way
// that remembers), consuming checks whose events come later (or never),
// take-backs, read-only checks and Sweeps.
type spikeTrace struct {
	t       *testing.T
	r       *rand.Rand
	s       *Set
	o       *spikeOracle
	now     int64
	pending []chat.Event // the events of consuming checks, to come
	taken   []chat.Event // consuming checks recorded, to take back
	nextID  int
	name    string
	alerts  int
}

func (tr *spikeTrace) step(step int) {
	t, r, s, o := tr.t, tr.r, tr.s, tr.o
	t.Helper()
	where := fmt.Sprintf("%s step %d (now %d)", tr.name, step, tr.now)
	if d := []int64{0, 1, 50, 400, 900, 3000, 200_000}[r.IntN(7)]; d < 200_000 || r.IntN(8) == 0 {
		if d == 200_000 {
			for len(tr.pending) > 0 {
				tr.observe(where)
			}
		}
		tr.now += d
	}
	room, user := fmt.Sprint("r", r.IntN(4)), fmt.Sprint("u", r.IntN(3+r.IntN(4)))
	switch x := r.IntN(100); {
	case x < 50:
		e := chat.Event{Room: room, User: user, TS: at(tr.now - int64(r.IntN(3))*r.Int64N(7_500))}
		if r.IntN(3) == 0 {
			e.ID = fmt.Sprint("e", step)
		}
		if len(tr.pending) > 0 && r.IntN(2) == 0 {
			tr.observe(where)
			return
		}
		tr.pending = append(tr.pending, e)
		tr.observe(where)
	case x < 65:
		id := fmt.Sprint("c", tr.nextID)
		if r.IntN(6) == 0 && tr.nextID > 0 { // the same check again
			id = fmt.Sprint("c", tr.nextID-1)
		}
		tr.nextID++
		res, recorded, _ := s.Consume(at(tr.now), Query{Room: room, User: user}, id)
		if slices.Contains(decided(res), "surge") {
			t.Fatalf("%s: a consuming check decided by the spike: %+v", where, res)
		}
		if recorded {
			o.take(room, user, id, at(tr.now))
			tr.taken = append(tr.taken, chat.Event{Room: room, User: user, ID: id, TS: at(tr.now)})
		}
		if r.IntN(4) != 0 {
			tr.pending = append(tr.pending, chat.Event{Room: room, User: user, ID: id, TS: at(tr.now + r.Int64N(300))})
		}
	case x < 70:
		if len(tr.taken) > 0 {
			i := r.IntN(len(tr.taken))
			e := tr.taken[i]
			tr.taken = slices.Delete(tr.taken, i, i+1)
			s.Unconsume(Query{Room: e.Room, User: e.User}, e.ID)
			o.untake(e.Room, e.User, e.ID)
		}
	case x < 88:
		res := s.Check(at(tr.now), room, user, "", false)
		if has, want := slices.Contains(decided(res), "calm"), o.holds(room, at(tr.now)); has != want {
			t.Fatalf("%s: check %s %s: calm applies %v, want %v (%+v)", where, room, user, has, want, o.counts(o.room(room), max(fdiv(at(tr.now), o.res), o.room(room).newest)))
		}
		if slices.Contains(decided(res), "surge") {
			t.Fatalf("%s: a check decided by the spike: %+v", where, res)
		}
	case x < 97:
		tr.active(where)
	default:
		s.Sweep(at(tr.now))
	}
}

// observe feeds the oldest pending event (at random, one of the first
// two: a little out of order).
func (tr *spikeTrace) observe(where string) {
	i := min(len(tr.pending)-1, tr.r.IntN(2))
	e := tr.pending[i]
	tr.pending = slices.Delete(tr.pending, i, i+1)
	got := surge(tr.s.Observe(e))
	want := []Alert{}
	if a := tr.o.observe(e.Room, e.User, e.ID, e.TS); a != nil {
		want = append(want, *a)
		tr.alerts++
	}
	if !reflect.DeepEqual(got, want) {
		tr.t.Fatalf("%s: %+v: alerts %s, want %s", where, e, showAlerts(got), showAlerts(want))
	}
}

func showAlerts(as []Alert) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "%+v", a)
		if a.Spike != nil {
			fmt.Fprintf(&b, " why %+v", *a.Spike)
		}
		b.WriteString("; ")
	}
	return b.String()
}

func (tr *spikeTrace) active(where string) {
	got := surge(tr.s.Active(at(tr.now)))
	for i := range got {
		got[i].Since = 0
	}
	if want := tr.o.active(at(tr.now)); !reflect.DeepEqual(got, want) {
		tr.t.Fatalf("%s: active %+v, want %+v", where, got, want)
	}
}

// Every crossing, every Active and every turning on of the policies with
// new_members is the oracle's, on random traces, at ties too (factors
// whose rate times the window is often whole), and a snapshot taken
// midway answers on as the Set it was taken from.
func TestSpikeAgainstOracle(t *testing.T) {
	seeds := 40
	if testing.Short() || raceEnabled {
		seeds = 12
	}
	alerts := 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 151))
		ps := spikePolicies([]float64{1, 1.2, 2, 2.5}[r.IntN(4)], 1+r.IntN(5), 1+r.IntN(3))
		tr := &spikeTrace{t: t, r: r, s: mustSet(t, ps), o: newSpikeOracle(ps[1]), name: fmt.Sprintf("seed %d (%+v)", seed, ps[1])}
		for step := range 3000 {
			tr.step(step)
			if step == 1500 { // a snapshot midway: the loaded Set goes on as the saved one
				b := tr.s.AppendState(nil)
				loaded := mustSet(t, ps)
				if err := loaded.LoadState(b); err != nil {
					t.Fatal(err)
				}
				if again := loaded.AppendState(nil); !bytes.Equal(again, b) {
					t.Fatalf("seed %d: a loaded state saves otherwise", seed)
				}
				verifySet(t, loaded)
				tr.s = loaded
			}
		}
		verifySet(t, tr.s)
		alerts += tr.alerts
	}
	if alerts < 10*seeds {
		t.Fatalf("%d alerts in %d traces: the traces hardly cross", alerts, seeds)
	}
}
