package throttle

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

func raidPolicies() []Policy {
	return []Policy{
		{Name: "raid", Scope: ScopeRoom, Algorithm: AlgJoinWave, Limit: 5, Window: 10 * time.Second},
		{Name: "newcomers", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 1, Window: 10 * time.Second, NewMembers: 10 * time.Minute},
		{Name: "flood", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 3, Window: 10 * time.Second},
	}
}

// A join wave counts a room's joins (not its messages, not its leaves),
// alerts once when they cross its limit, and while it holds, the
// new-members policy decides the room's new members only: regular members
// are untouched, and no message decision is the join wave's own.
func TestJoinWave(t *testing.T) {
	s := mustSet(t, raidPolicies())
	s.Observe(chat.Event{Room: "lobby", User: "regular", TS: at(0), Text: "hi"}) // long before the raid
	now := int64(20 * 60_000)
	s.Observe(chat.Event{Room: "lobby", User: "regular", TS: at(now), Text: "hi"})
	var alerts []Alert
	for i := range 6 {
		alerts = append(alerts, s.Observe(chat.Event{Room: "lobby", User: fmt.Sprint("bot", i), TS: at(now + int64(i)), Kind: chat.KindJoin})...)
		alerts = append(alerts, s.Observe(chat.Event{Room: "lobby", User: "regular", TS: at(now + int64(i)), Kind: chat.KindLeave})...)
	}
	if len(alerts) != 1 || alerts[0].Policy != "raid" || alerts[0].Room != "lobby" || alerts[0].Count != 6 {
		t.Fatalf("alerts of six joins: %+v, want the raid's crossing once", alerts)
	}
	now += 10
	policies := func(res Result) (names []string) {
		for _, d := range res.Decisions {
			names = append(names, d.Policy)
		}
		return names
	}
	s.Observe(chat.Event{Room: "lobby", User: "bot0", TS: at(now), Text: "spam"})
	if res := s.Check(at(now), "lobby", "bot0", "", false); res.Allowed || fmt.Sprint(policies(res)) != "[newcomers flood]" {
		t.Fatalf("a raider during the wave: %+v, want denied by newcomers", res)
	}
	if res := s.Check(at(now), "lobby", "regular", "", false); !res.Allowed || fmt.Sprint(policies(res)) != "[flood]" {
		t.Fatalf("a regular during the wave: %+v, want only flood", res)
	}
	if act := s.Active(at(now)); len(act) != 1 || act[0].Policy != "raid" {
		t.Fatalf("active: %+v", act)
	}
	// The wave ends as the joins leave the window: newcomers no longer applies.
	if res := s.Check(at(now+10_000), "lobby", "bot0", "", false); !res.Allowed || fmt.Sprint(policies(res)) != "[flood]" {
		t.Fatalf("after the wave: %+v", res)
	}
}

// On random traces of joins, leaves and messages, in and out of order,
// the join wave's count and whether new-members applies are what plain
// lists of joins and first sightings say.
func TestJoinWaveAgainstOracle(t *testing.T) {
	for seed := range 20 {
		r := rand.New(rand.NewPCG(uint64(seed), 41))
		s := mustSet(t, raidPolicies())
		joins := map[string]*slidingOracle{}
		first := map[[2]string]int64{}
		now := int64(0)
		for step := range 2000 {
			now += []int64{0, 1, 50, 400, 3000, 60_000}[r.IntN(6)]
			room, user := fmt.Sprint("r", r.IntN(2)), fmt.Sprint("u", r.IntN(8))
			at := now - int64(r.IntN(3))*int64(r.IntN(2000)) // sometimes late
			if joins[room] == nil {
				joins[room] = &slidingOracle{limit: 5, n: 10, res: 1000}
			}
			switch r.IntN(4) {
			case 0, 1:
				kind := []chat.Kind{chat.KindMessage, chat.KindJoin, chat.KindLeave}[r.IntN(3)]
				s.Observe(chat.Event{Room: room, User: user, TS: at0(at), Kind: kind})
				if kind == chat.KindJoin {
					joins[room].hit(at0(at), 1)
				}
				if kind != chat.KindLeave {
					k := [2]string{room, user}
					if t, ok := first[k]; !ok || at0(at) < t {
						first[k] = at0(at)
					}
				}
			default:
				res := s.Check(at0(now), room, user, "", false)
				wave, _, _ := joins[room].decide(at0(now), 1)
				t0, seen := first[[2]string{room, user}]
				applies := !wave && (!seen || at0(now)-t0 < 10*60_000)
				has := len(res.Decisions) > 0 && res.Decisions[0].Policy == "newcomers"
				if has != applies {
					t.Fatalf("seed %d step %d: %s %s: newcomers decides %v, want %v (wave %v, first %d seen %v)", seed, step, room, user, has, applies, !wave, t0, seen)
				}
			}
		}
	}
}

func at0(ms int64) int64 { return at(ms) }
