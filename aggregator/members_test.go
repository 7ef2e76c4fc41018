package aggregator_test

import (
	"testing"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
)

// The edges of the membership rule (docs/contract.md section 12), with
// one window of 1m (the horizon): each case is the (room, user) events in
// order, ms after t0, and the joins and leaves the room's view counts at
// the last of them.
func TestMembershipEdges(t *testing.T) {
	const t0 = 1_764_000_000_000
	j, l := chat.KindJoin, chat.KindLeave
	type ev struct {
		at   int64
		kind chat.Kind
		user string
	}
	for _, c := range []struct {
		name          string
		evs           []ev
		joins, leaves int64
	}{
		{"a join", []ev{{0, j, "a"}}, 1, 0},
		{"a display name change", []ev{{0, j, "a"}, {5_000, j, "a"}}, 1, 0},
		{"two users", []ev{{0, j, "a"}, {1, j, "b"}, {2, j, "a"}}, 2, 0},
		{"a leave of a user never seen to join", []ev{{0, l, "a"}}, 0, 1},
		{"a leave twice", []ev{{0, j, "a"}, {1, l, "a"}, {2, l, "a"}}, 1, 1},
		{"leave and join again", []ev{{0, j, "a"}, {1, l, "a"}, {2, j, "a"}, {3, j, "a"}}, 2, 1},
		{"the last join just inside the horizon", []ev{{0, j, "a"}, {59_999, j, "a"}}, 1, 0},
		{"the last join at the horizon", []ev{{30_000, j, "a"}, {90_000, j, "a"}}, 1, 0},
		// Out of order: the last in stream order decides, whatever its ts.
		{"a late leave before a join", []ev{{10_000, j, "a"}, {5_000, l, "a"}, {20_000, j, "a"}}, 2, 1},
		{"a join behind the last", []ev{{10_000, j, "a"}, {5_000, j, "a"}}, 1, 0},
		// A join older than every window still says who is joined.
		{"a late join", []ev{{100_000, j, "b"}, {39_000, j, "a"}, {98_000, j, "a"}}, 1, 0},
	} {
		a, err := aggregator.New(mustWindows(t, "1m"))
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		for _, e := range c.evs {
			last = max(last, e.at)
			a.Observe(t0+last, []chat.Event{{Room: "r", User: e.user, TS: t0 + e.at, Kind: e.kind}}, nil)
		}
		v, _ := a.Room("r", "1m", 0, t0+last)
		if v.Joins != c.joins || v.Leaves != c.leaves {
			t.Errorf("%s: %d joins, %d leaves; want %d, %d", c.name, v.Joins, v.Leaves, c.joins, c.leaves)
		}
	}
}

// A repeat is marked so, for the throttle policies that read the batch
// next; the other events are as they were.
func TestMembershipMarksRepeats(t *testing.T) {
	a, _ := aggregator.New(mustWindows(t, "1m"))
	const t0 = 1_764_000_000_000
	evs := []chat.Event{
		{Room: "r", User: "a", TS: t0, Kind: chat.KindJoin},
		{Room: "r", User: "a", TS: t0, Kind: chat.KindMessage},
		{Room: "r", User: "a", TS: t0 + 1, Kind: chat.KindJoin},
		{Room: "s", User: "a", TS: t0 + 1, Kind: chat.KindJoin},
	}
	a.Observe(t0+1, evs, nil)
	want := []chat.Kind{chat.KindJoin, chat.KindMessage, chat.KindRepeat, chat.KindJoin}
	for i, e := range evs {
		if e.Kind != want[i] {
			t.Errorf("event %d: %v, want %v", i, e.Kind, want[i])
		}
	}
}
