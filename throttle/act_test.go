package throttle

import (
	"fmt"
	"math/rand/v2"
	"slices"
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
