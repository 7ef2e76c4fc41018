package throttle

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/moderation"
)

func until(ms int64) *chat.Time { t := ct(ms); return &t }

// A timeout denies every check of its user, in its room or everywhere,
// until it ends; a slow mode lets each user post once per interval, learnt
// from the messages observed and the consuming checks allowed; each
// decision names its action and says when it frees; an exempt user or
// role is allowed and says so.
func TestActions(t *testing.T) {
	book := moderation.NewBook()
	s := mustSet(t, DefaultPolicies()[:1])
	s.Moderate(book)
	book.Put(moderation.Action{Kind: moderation.Timeout, User: "troll", Until: until(60_000), Set: ct(0)}, 0)
	book.Put(moderation.Action{Kind: moderation.Slowmode, Room: "lobby", Interval: 30_000, Set: ct(0), ExemptRoles: []string{"moderator"}}, 0)
	book.Put(moderation.Action{Kind: moderation.Timeout, User: "bob", Room: "quiet", Set: ct(0)}, 0) // no end

	res := s.Decide(at(1000), Query{Room: "elsewhere", User: "troll"})
	if res.Allowed || res.Decisions[0].Policy != ActionTimeout || res.Decisions[0].RetryAfterMs != 59_000 || *res.Decisions[0].Until != ct(60_000) {
		t.Fatalf("timed out: %+v", res)
	}
	if res := s.Decide(at(60_000), Query{Room: "elsewhere", User: "troll"}); !res.Allowed || len(res.Decisions) != 1 {
		t.Fatalf("at the timeout's end: %+v, want allowed by the policy alone", res)
	}
	if res := s.Decide(at(1000), Query{Room: "quiet", User: "bob"}); res.Allowed || res.Decisions[0].Scope != ScopeUserInRoom || res.Decisions[0].Until != nil {
		t.Fatalf("timed out in a room, no end: %+v", res)
	}
	if res := s.Decide(at(1000), Query{Room: "elsewhere", User: "bob"}); !res.Allowed {
		t.Fatalf("bob elsewhere: %+v", res)
	}
	// Slow mode: the first message is allowed; after it (an event), the
	// next waits 30 s from it.
	if res := s.Decide(at(1000), Query{Room: "lobby", User: "alice"}); !res.Allowed || res.Decisions[0].Policy != ActionSlowmode {
		t.Fatalf("slow mode, nothing posted: %+v", res)
	}
	s.Observe(chat.Event{Room: "lobby", User: "alice", TS: at(2000)})
	res = s.Decide(at(12_000), Query{Room: "lobby", User: "alice"})
	if d := res.Decisions[0]; res.Allowed || d.RetryAfterMs != 20_000 || d.Count != 1 || d.Limit != 1 {
		t.Fatalf("slow mode, posted 10 s ago: %+v", res)
	}
	if res := s.Decide(at(12_000), Query{Room: "lobby", User: "alice", Roles: []string{"moderator"}}); !res.Allowed || !res.Decisions[0].Exempt {
		t.Fatalf("a moderator in slow mode: %+v", res)
	}
	if res := s.Decide(at(32_000), Query{Room: "lobby", User: "alice"}); !res.Allowed {
		t.Fatalf("slow mode, 30 s on: %+v", res)
	}
	// A consuming check in slow mode posts: the next one waits.
	if res, _, _ := s.Consume(at(40_000), Query{Room: "lobby", User: "carol"}, "c1"); !res.Allowed {
		t.Fatalf("carol's first: %+v", res)
	}
	if res, rec, _ := s.Consume(at(41_000), Query{Room: "lobby", User: "carol"}, "c2"); res.Allowed || rec {
		t.Fatalf("carol's second, 1 s on: %+v", res)
	}
	// Lifted: allowed at once.
	book.Delete(moderation.KeyOf(moderation.Slowmode, "lobby", ""), 0)
	if res := s.Decide(at(41_000), Query{Room: "lobby", User: "carol"}); !res.Allowed || len(res.Decisions) != 1 {
		t.Fatalf("slow mode lifted: %+v", res)
	}
	if act := ActionsActive(book, at(1000)); len(act) != 2 {
		t.Fatalf("active actions: %+v", act)
	}
}

// A policy that exempts a user or a role allows it, says so, and does not
// count a consuming check of it.
func TestPolicyExemptions(t *testing.T) {
	p := Policy{Name: "p", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 1, Window: time.Minute,
		ExemptUsers: []string{"bot-*"}, ExemptRoles: []string{"vip"}}
	s := mustSet(t, []Policy{p})
	for i, q := range []Query{{Room: "r", User: "bot-1"}, {Room: "r", User: "bot-1"}, {Room: "r", User: "u", Roles: []string{"vip"}}, {Room: "r", User: "u", Roles: []string{"vip"}}} {
		res, rec, _ := s.Consume(at(int64(i)), q, "m"+string(rune('a'+i)))
		if !res.Allowed || !res.Decisions[0].Exempt || rec {
			t.Fatalf("exempt %+v: %+v recorded %v", q, res, rec)
		}
	}
	if res := s.Decide(at(10), Query{Room: "r", User: "u"}); !res.Allowed || res.Decisions[0].Exempt || res.Decisions[0].Count != 0 {
		t.Fatalf("u without its role: %+v, want allowed with nothing counted", res)
	}
}

// A Set's slow posts and first sightings are in its state: a Set that
// loads it denies the user who posted under slow mode just before, and
// does not take a regular for a new member (issue 33: a user who waited
// for a deploy skipped slow mode). A state without them (format 2, or a
// Set that never saw one) loads as one that knows none.
func TestStateKeepsSightings(t *testing.T) {
	book := moderation.NewBook()
	book.Put(moderation.Action{Kind: moderation.Slowmode, Room: "lobby", Interval: 30_000, Set: ct(0)}, 0)
	now := int64(20 * 60_000)
	fresh := func() *Set {
		s := mustSet(t, raidPolicies())
		s.Moderate(book)
		return s
	}
	s := fresh()
	s.Observe(chat.Event{Room: "lobby", User: "regular", TS: at(0), Text: "hi"})
	for i := range 6 { // a join wave: newcomers applies to new members
		s.Observe(chat.Event{Room: "lobby", User: fmt.Sprint("bot", i), TS: at(now + int64(i)), Kind: chat.KindJoin})
	}
	s.Observe(chat.Event{Room: "lobby", User: "alice", TS: at(now + 10), Text: "hi"})
	want := func(s *Set, what string) {
		t.Helper()
		res := s.Decide(at(now+1000), Query{Room: "lobby", User: "alice"})
		if res.Allowed || res.Decisions[0].Policy != ActionSlowmode || res.Decisions[0].RetryAfterMs != 29_010 {
			t.Fatalf("%s: alice, 1 s after her post under slow mode: %+v, want denied by slowmode for 29.01 s", what, res)
		}
		if res := s.Check(at(now+1000), "lobby", "regular", "", false); len(res.Decisions) != 2 || res.Decisions[1].Policy != "flood" {
			t.Fatalf("%s: a regular during the wave: %+v, want slowmode and flood, not newcomers", what, res)
		}
	}
	want(s, "before")
	saved := s.AppendState(nil)
	if saved[0] != 3 {
		t.Fatalf("format %d, want 3", saved[0])
	}
	loaded := fresh()
	if err := loaded.LoadState(saved); err != nil {
		t.Fatal(err)
	}
	want(loaded, "loaded")
	if again := loaded.AppendState(nil); !bytes.Equal(again, saved) {
		t.Fatal("the loaded Set saves another state")
	}

	// Truncated in the sightings, the state is refused whole.
	if err := fresh().LoadState(saved[:len(saved)-1]); err == nil {
		t.Fatal("a state cut in its sightings loaded")
	}
	// Reset forgets them.
	loaded.Reset()
	if res := loaded.Decide(at(now+1000), Query{Room: "lobby", User: "alice"}); !res.Allowed {
		t.Fatalf("after Reset: %+v, want allowed", res)
	}
}
