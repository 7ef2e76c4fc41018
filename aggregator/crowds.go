package aggregator

import (
	"strings"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// Joins and leaves (docs/contract.md section 12) are counted per room and
// window beside the messages, and apart from them: a join is not a
// message, makes nobody a talker and no user distinct or active, and a
// room with joins alone is not an active room. So they need no pair and
// no user, only the room: a crowd, kept in a map of its own (a.crowds)
// by the same rules as the rooms of keys.go, over the same machinery:
//
//   - a.crowds holds exactly the rooms with joins or leaves in at least one
//     window; live is the number of (window, kind) with any;
//   - in each window, two sparse keyed counters (joins and leaves per
//     crowd, whose cells are also the room's series_joins) and two dense
//     counters for the totals, all moved by window.advance.
//
// Memory is bounded by the (room, bucket) cells the windows hold, as for
// messages, and a crowd with nothing left in any window is forgotten.
type crowd struct {
	name string
	w    []crowdWin
	live int
}

type crowdWin struct {
	crowd         *crowd
	joins, leaves rolling.Tally
}

func joinsOf(cw *crowdWin) *rolling.Tally  { return &cw.joins }
func leavesOf(cw *crowdWin) *rolling.Tally { return &cw.leaves }

// crowdFell is the fell callback of a window's joins or leaves (tally
// says which): a count at zero is one (window, kind) fewer.
func (a *Aggregator) crowdFell(tally func(*crowdWin) *rolling.Tally) func(*crowdWin, int64) {
	return func(cw *crowdWin, _ int64) {
		if tally(cw).Count > 0 {
			return
		}
		c := cw.crowd
		if c.live--; c.live == 0 {
			delete(a.crowds, c.name)
			a.crowds = shrunk(a.crowds, &a.peak.crowds)
		}
	}
}

func (a *Aggregator) newCrowd(name string) *crowd {
	c, w := withWindows[crowd, crowdWin](len(a.ws))
	c.name, c.w = strings.Clone(name), w
	for i := range c.w {
		c.w[i].crowd = c
	}
	a.crowds[c.name] = c
	a.peak.crowds = max(a.peak.crowds, len(a.crowds))
	return c
}

// observeCrowd counts a join or a leave whose buckets place found.
func (a *Aggregator) observeCrowd(ev *chat.Event) {
	c := a.crowds[ev.Room]
	if c == nil {
		c = a.newCrowd(ev.Room)
	}
	for _, w := range a.ws {
		if b := a.buckets[w.i]; b != lateBucket {
			a.addCrowd(w, c, ev.Kind == chat.KindJoin, b, 1)
		}
	}
}

// addCrowd adds n joins (or leaves) of c in bucket b of window w.
func (a *Aggregator) addCrowd(w *window, c *crowd, join bool, b, n int64) {
	cw := &c.w[w.i]
	total, keyed, t := &w.leaves, w.roomLeaves, &cw.leaves
	if join {
		total, keyed, t = &w.joins, w.roomJoins, &cw.joins
	}
	if t.Count == 0 {
		c.live++
	}
	total.Add(b, n)
	keyed.Add(cw, t, b, n)
}
