package throttle

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/moderation"
)

// A policy that acts reports, beside its alerts, every message over it:
// exactly those a check just before them would have denied, the first of
// each run of denials as the crossing (First), the others as later
// messages of the marked key, each with when the key is allowed again.
// Checked against the Set's own check of each message, on random traces
// fed in random batches, for each algorithm and with a penalty.
func TestOversAreTheDenials(t *testing.T) {
	base := []Policy{
		{Name: "sw", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 3, Window: 10 * time.Second, Act: []ActKind{ActMute, ActRedact}},
		{Name: "fixed", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 4, Window: 10 * time.Second, Act: []ActKind{ActRedact}},
		{Name: "gcra", Scope: ScopeRoom, Algorithm: AlgGCRA, Limit: 5, Window: 10 * time.Second, Burst: 2, Act: []ActKind{ActRedact}},
		{Name: "penalty", Scope: ScopeUserInRoom, Algorithm: AlgTokenBucket, Limit: 2, Window: 5 * time.Second, Penalty: 20 * time.Second, Act: []ActKind{ActMute}},
		{Name: "quiet", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 1, Window: 10 * time.Second},
	}
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			s := mustSet(t, base)
			var evs []chat.Event
			at := int64(1_000_000)
			for n := range 400 {
				at += rng.Int64N(3000)
				evs = append(evs, chat.Event{Kind: chat.KindMessage, ID: fmt.Sprint("m", n), TS: at,
					Room: fmt.Sprint("r", rng.IntN(2)), User: fmt.Sprint("u", rng.IntN(3))})
			}
			marked := map[string]bool{}
			var firsts, agains int
			for start := 0; start < len(evs); {
				end := min(len(evs), start+1+rng.IntN(6))
				// What a check just before each message says: those of a
				// batch are decided on a copy fed one at a time.
				type want struct {
					denied  bool
					retryMs int64
				}
				wants := make([]map[string]want, end-start)
				shadow := mustSet(t, base)
				if err := shadow.LoadState(s.AppendState(nil)); err != nil {
					t.Fatal(err)
				}
				for j, e := range evs[start:end] {
					wants[j] = map[string]want{}
					for _, d := range shadow.Check(e.TS, e.Room, e.User, "", false).Decisions {
						wants[j][d.Policy] = want{!d.Allowed, d.RetryAfterMs}
					}
					shadow.ObserveBatch([]chat.Event{e}, nil, nil)
				}
				got := make([]map[string]Over, end-start)
				for j := range got {
					got[j] = map[string]Over{}
				}
				s.ObserveBatch(evs[start:end], nil, func(i int, o Over) { got[i][o.Policy] = o })
				for j, e := range evs[start:end] {
					for _, p := range base {
						w, o := wants[j][p.Name], got[j][p.Name]
						r, u := keyOf(p.Scope, e.Room, e.User)
						key := p.Name + "/" + r + "/" + u
						reported := o.Policy != ""
						switch {
						case len(p.Act) == 0 && reported:
							t.Fatalf("event %d: %s acts on nothing, reported %+v", start+j, p.Name, o)
						case len(p.Act) == 0:
						case reported != w.denied:
							t.Fatalf("event %d (%s in %s at %d): %s reported %v, but a check before it denied: %v", start+j, e.User, e.Room, e.TS, p.Name, reported, w.denied)
						case reported && (o.First == marked[key] || o.Event != e.ID || o.At != e.TS || o.Room != r || o.User != u):
							t.Fatalf("event %d: %s: %+v; want first %v, event %s, key %q/%q", start+j, p.Name, o, !marked[key], e.ID, r, u)
						case reported && o.Denied < e.TS+w.retryMs:
							t.Fatalf("event %d: %s: allowed again at %d, before the check's retry (%d)", start+j, p.Name, o.Denied, e.TS+w.retryMs)
						}
						if len(p.Act) > 0 {
							marked[key] = w.denied
						}
						if reported && o.First {
							firsts++
						} else if reported {
							agains++
						}
					}
				}
				start = end
			}
			if firsts == 0 || agains == 0 {
				t.Errorf("%d crossings and %d later messages over: the trace tests little", firsts, agains)
			}
		})
	}
}

// A join wave that locks its room crosses as any join wave does, and the
// room stays locked, its joins denied, for lock_for after the crossing:
// Over.Denied is when the lock ends, the lock's penalty.
func TestLockHoldsForLockFor(t *testing.T) {
	s := mustSet(t, []Policy{{Name: "raid", Scope: ScopeRoom, Algorithm: AlgJoinWave, Limit: 3, Window: time.Minute, Act: []ActKind{ActLock}, LockFor: 10 * time.Minute}})
	var overs []Over
	var evs []chat.Event
	for i := range 5 {
		evs = append(evs, chat.Event{Kind: chat.KindJoin, Room: "lobby", User: fmt.Sprint("bot", i), ID: fmt.Sprint("j", i), TS: int64(1000 + i)})
	}
	s.ObserveBatch(evs, nil, func(_ int, o Over) { overs = append(overs, o) })
	if len(overs) != 2 || !overs[0].First || overs[0].Event != "j3" || overs[0].Denied != 1003+10*time.Minute.Milliseconds() {
		t.Fatalf("overs %+v; want the 4th join's crossing, locked 10m, then the 5th", overs)
	}
	// The wave's window is long over, the lock is not: the room is
	// active (denied) until the lock ends.
	for _, c := range []struct {
		at     int64
		active bool
	}{{1003 + 5*time.Minute.Milliseconds(), true}, {1002 + 10*time.Minute.Milliseconds(), true}, {1003 + 10*time.Minute.Milliseconds(), false}} {
		if got := len(s.Active(c.at)) == 1; got != c.active {
			t.Errorf("at %d: active %v, want %v", c.at, got, c.active)
		}
	}
}

// Under slow mode, each message slow mode would have denied (a post
// within the interval of the user's last in the room, as a check just
// before it says) is reported, to be redacted, with when the user may
// post again; an exempt user's never.
func TestSlowModeOvers(t *testing.T) {
	book := moderation.NewBook()
	book.Put(moderation.Action{Kind: moderation.Slowmode, Room: "r", Interval: 10_000, ExemptUsers: []string{"mod*"}}, 1)
	s := mustSet(t, nil)
	s.Moderate(book)
	var got []string
	msg := func(user string, at int64) chat.Event {
		return chat.Event{Kind: chat.KindMessage, Room: "r", User: user, TS: at, ID: fmt.Sprint(user, "@", at)}
	}
	s.ObserveBatch([]chat.Event{msg("u", 0), msg("u", 5000), msg("mod1", 0), msg("mod1", 1), msg("u", 11000), msg("u", 12000)}, nil, func(_ int, o Over) {
		if o.Policy != ActionSlowmode || !slices.Equal(o.Acts, []ActKind{ActRedact}) {
			t.Errorf("over %+v", o)
		}
		got = append(got, fmt.Sprint(o.Event, " until ", o.Denied))
	})
	// Every message that reached the bus is a post: u's at 5000 too, as
	// a check at 11000 would say.
	if want := []string{"u@5000 until 10000", "u@11000 until 15000", "u@12000 until 21000"}; !slices.Equal(got, want) {
		t.Errorf("slow mode's overs %q, want %q", got, want)
	}
}

// A join's consuming check (Query.Kind chat.KindJoin) is decided by the
// join waves of its room that lock it, and by nothing else: the join that
// would cross is refused (the crossing, with its alert), and so is every
// later one until lock_for after the crossing. The joins that arrive on
// the bus with the ids of the allowed ones are not counted again by the
// lock, and are counted by the join waves that only alert.
func TestConsumeJoinLocks(t *testing.T) {
	s := mustSet(t, []Policy{
		{Name: "flood", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 1, Window: time.Minute},
		{Name: "watch", Scope: ScopeRoom, Algorithm: AlgJoinWave, Limit: 2, Window: time.Minute},
		{Name: "raid", Scope: ScopeRoom, Algorithm: AlgJoinWave, Limit: 3, Window: time.Minute, Act: []ActKind{ActLock}, LockFor: 10 * time.Minute},
	})
	join := func(now int64, user string) (Result, []Alert) {
		res, _, alerts := s.Consume(now, Query{Room: "lobby", User: user, Kind: chat.KindJoin}, "j-"+user)
		return res, alerts
	}
	var evs []chat.Event
	for i := range 3 {
		user := fmt.Sprint("u", i)
		if res, _ := join(at(int64(i)), user); !res.Allowed || !*res.Consumed || len(res.Decisions) != 1 || res.Decisions[0].Policy != "raid" {
			t.Fatalf("join %d: %+v, want allowed and consumed, decided by raid alone", i, res)
		}
		evs = append(evs, chat.Event{Kind: chat.KindJoin, Room: "lobby", User: user, ID: "j-" + user, TS: at(int64(i))})
	}
	var watched []Alert
	s.ObserveBatch(evs, func(_ int, a Alert) { watched = append(watched, a) }, nil)
	if len(watched) != 1 || watched[0].Policy != "watch" {
		t.Errorf("the joins on the bus alerted %+v, want watch's crossing alone", watched)
	}

	crossing := at(3)
	lockEnd := crossing + (10 * time.Minute).Milliseconds()
	res, alerts := join(crossing, "u3")
	if d := res.Decisions[0]; res.Allowed || *res.Consumed || d.Count != 3 || d.RetryAfterMs != lockEnd-crossing {
		t.Fatalf("the join that would cross: %+v, want refused with the 3 joins counted once, for lock_for", res)
	}
	if len(alerts) != 1 || alerts[0].Policy != "raid" || alerts[0].Event != "j-u3" || alerts[0].Until == nil || int64(*alerts[0].Until) != lockEnd {
		t.Errorf("alerts %+v, want raid's crossing by j-u3, locked until %d", alerts, lockEnd)
	}
	for _, c := range []struct {
		at      int64
		allowed bool
	}{{crossing + 1, false}, {crossing + (5 * time.Minute).Milliseconds(), false}, {lockEnd - 1, false}, {lockEnd, true}} {
		if res, alerts := join(c.at, fmt.Sprint("late-", c.at)); res.Allowed != c.allowed || len(alerts) != 0 {
			t.Errorf("a join at crossing%+dms: %+v, alerts %v; want allowed %v, no alert", c.at-crossing, res, alerts, c.allowed)
		}
	}
	if res := s.Check(lockEnd, "lobby", "u0", "", false); !res.Allowed || len(res.Decisions) != 1 || res.Decisions[0].Count != 0 {
		t.Errorf("the message policies after the joins: %+v, want flood alone, counting nothing", res)
	}
	if res, _, _ := s.Consume(lockEnd, Query{Room: "lobby", User: "u0"}, "m-1"); !res.Allowed || len(res.Decisions) != 1 || res.Decisions[0].Policy != "flood" {
		t.Errorf("a message's consuming check: %+v, want decided by flood alone", res)
	}
}

// Of n joins of one room checked at once from many goroutines, exactly
// the lock's limit is allowed; a room it does not see is not decided.
func TestConsumeJoinBurstIsExact(t *testing.T) {
	s := mustSet(t, []Policy{{Name: "raid", Scope: ScopeRoom, Algorithm: AlgJoinWave, Limit: 20, Window: time.Minute, Rooms: []string{"public-*"}, Act: []ActKind{ActLock}}})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if res, _, _ := s.Consume(at(0), Query{Room: "public-lobby", User: fmt.Sprint("bot-", g, "-", i), Kind: chat.KindJoin}, fmt.Sprint("j-", g, "-", i)); res.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 20 {
		t.Errorf("%d of 400 joins allowed, want the limit, 20", got)
	}
	if res, _, _ := s.Consume(at(0), Query{Room: "private", User: "bot", Kind: chat.KindJoin}, "j-private"); !res.Allowed || len(res.Decisions) != 0 {
		t.Errorf("a join of a room the lock does not see: %+v, want allowed, decided by nothing", res)
	}
}
