package group

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/throttle"
)

// The members' protocol: what one member asks another (or itself) about
// the partitions it owns, over NATS request-reply on
// chatpulse.group.<group>.query.<member>, as JSON.
//
// Every question carries the protocol's version. A member that gets a
// question of another version, or an operation it does not know (a newer
// member's, during a rolling upgrade), answers with Unknown set and says
// what it knows; the asker counts that member's partitions as missing, as
// if it had not answered, and logs why. A version changes when a
// question or an answer changes meaning; adding an operation does not
// change it.
const protocol = 1

// An op is what a question asks for: a partial view, the decisions of a
// throttle check, the active keys.
type op string

const (
	opOverview  = op(aggregator.ViewOverview)
	opRooms     = op(aggregator.ViewRooms)
	opRoom      = op(aggregator.ViewRoom)
	opUser      = op(aggregator.ViewUser)
	opCheck     = op("check")
	opConsume   = op("consume")   // a consuming check's part: decide and record
	opJoin      = op("join")      // a join's consuming check: see Member.Consume
	opUnconsume = op("unconsume") // take back what a consume recorded
	opActive    = op("active")
	opBook      = op("book") // answered once the member holds the moderators' actions up to Book
)

// A question is one op about some partitions.
type question struct {
	V       int      `json:"v"`
	Op      op       `json:"op"`
	Window  string   `json:"window,omitempty"`
	K       int      `json:"k,omitempty"`     // overview, room
	Limit   int      `json:"limit,omitempty"` // rooms
	Room    string   `json:"room,omitempty"`  // room, check
	User    string   `json:"user,omitempty"`  // user, check
	Text    string   `json:"text,omitempty"`  // check
	HasText bool     `json:"has_text,omitempty"`
	ID      string   `json:"id,omitempty"`    // consume, unconsume
	Roles   []string `json:"roles,omitempty"` // check, consume
	// Mentions are whom the checked message mentions (check, consume):
	// with its text, what it costs (docs/contract.md section 15).
	Mentions []string `json:"mentions,omitempty"`
	// Book is the revision of the moderators' actions the asker holds
	// (check, consume): the answer waits until this member's holds as
	// much, so that an action set on one member holds on every member
	// for the very next check.
	Book  uint64 `json:"book,omitempty"`
	Stage string `json:"stage,omitempty"` // check: whose policies
	Now   int64  `json:"now"`
	Parts []int  `json:"parts"`
}

// awaitBook waits, up to a second, until this member's book holds the
// moderators' actions up to revision rev (its watch delivers them within
// milliseconds of the write).
func (m *Member) awaitBook(rev uint64) {
	if m.cfg.Book == nil || m.cfg.Book.Rev() >= rev {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.cfg.Book.Await(ctx, rev)
}

// query is a check question's throttle query: a join's, for opJoin.
func (q *question) query() throttle.Query {
	tq := throttle.Query{Room: q.Room, User: q.User, Text: q.Text, HasText: q.HasText, Mentions: q.Mentions, Roles: q.Roles}
	if q.Op == opJoin {
		tq.Kind = chat.KindJoin
	}
	return tq
}

// An answer covers the parts of the question that its member owns and has
// caught up (Parts), read at as_of AsOf.
type answer struct {
	Parts     []int                `json:"parts"`
	AsOf      int64                `json:"as_of"`
	Overview  *aggregator.Overview `json:"overview,omitempty"`
	Rooms     *aggregator.Rooms    `json:"rooms,omitempty"`
	Room      *aggregator.Room     `json:"room,omitempty"`
	User      *aggregator.User     `json:"user,omitempty"`
	Decisions []throttle.Decision  `json:"decisions,omitempty"`
	Allowed   bool                 `json:"allowed,omitempty"`  // consume: no enforcing policy denied
	Consumed  bool                 `json:"consumed,omitempty"` // consume: counted by the check, now or before
	Recorded  bool                 `json:"recorded,omitempty"` // consume: recorded now (an unconsume takes it back)
	Undone    bool                 `json:"undone,omitempty"`   // unconsume: something was taken back now
	Active    []throttle.Active    `json:"active,omitempty"`
	Error     string               `json:"error,omitempty"`
	// Unknown: the member does not know the question's version or op
	// (Error says which it knows).
	Unknown bool `json:"unknown,omitempty"`
}

// known are the ops this member answers.
var known = []op{opOverview, opRooms, opRoom, opUser, opCheck, opConsume, opJoin, opUnconsume, opActive, opBook}

// unknown is the answer to a question this member cannot answer, or nil.
func unknown(q question) *answer {
	switch {
	case q.V != protocol:
		return &answer{Unknown: true, Error: fmt.Sprintf("protocol version %d; this member speaks %d", q.V, protocol)}
	case !slices.Contains(known, q.Op):
		return &answer{Unknown: true, Error: fmt.Sprintf("unknown op %q; this member knows %v", q.Op, known)}
	}
	return nil
}

// serve answers a question from another member.
func (m *Member) serve(request []byte) []byte {
	var q question
	var a answer
	if err := json.Unmarshal(request, &q); err != nil {
		a.Error = "bad question: " + err.Error()
	} else if u := unknown(q); u != nil {
		a = *u
	} else {
		a = m.answer(q)
	}
	data, _ := json.Marshal(a)
	return data
}

// owned returns the partitions of q this member may answer for now.
func (m *Member) owned(parts []int) []*partition {
	now := m.leases.Now()
	t := m.leases.Table()
	var out []*partition
	for _, p := range parts {
		if pt := m.parts.run(p); pt != nil && pt.caughtUp() && t.Owns(p, now) {
			out = append(out, pt)
		}
	}
	return out
}

// answer answers q for the partitions of it this member holds. Every
// partial view is read at one as_of: the latest of the partitions' clocks
// and q.Now.
func (m *Member) answer(q question) answer {
	if q.Op == opBook {
		m.awaitBook(q.Book)
		return answer{Parts: []int{}, AsOf: q.Now}
	}
	pts := m.owned(q.Parts)
	a := answer{Parts: make([]int, 0, len(pts)), AsOf: q.Now}
	for _, pt := range pts {
		a.Parts = append(a.Parts, pt.p)
	}
	if len(pts) == 0 {
		return a
	}
	m.awaitBook(q.Book)
	fail := func(err error) answer { return answer{Error: err.Error()} }
	switch q.Op {
	case opOverview:
		var rooms, users []aggregator.Overview
		read := func(t int64) error {
			rooms, users = rooms[:0], users[:0]
			for _, pt := range pts {
				r, err := pt.stage(stageRoom).Agg.Overview(q.Window, q.K, t)
				if err != nil {
					return err
				}
				u, _ := pt.stage(stageUser).Agg.Overview(q.Window, q.K, t)
				rooms, users = append(rooms, r), append(users, u)
			}
			return nil
		}
		if err := read(q.Now); err != nil {
			return fail(err)
		}
		if t := latest(rooms, users); t > q.Now {
			read(t)
		}
		v := mergeOverview(rooms, users, q.K, m.seconds(q.Window))
		a.Overview, a.AsOf = &v, int64(v.AsOf)
	case opRooms:
		var parts []aggregator.Rooms
		for again, t := true, q.Now; again; {
			parts, again = parts[:0], false
			for _, pt := range pts {
				r, err := pt.stage(stageRoom).Agg.Rooms(q.Window, q.Limit, t)
				if err != nil {
					return fail(err)
				}
				if int64(r.AsOf) > t {
					t, again = int64(r.AsOf), true
				}
				parts = append(parts, r)
			}
		}
		v := mergeRooms(parts, q.Limit)
		a.Rooms, a.AsOf = &v, int64(v.AsOf)
	case opRoom:
		v, err := pts[0].stage(stageRoom).Agg.Room(q.Room, q.Window, q.K, q.Now)
		if err != nil {
			return fail(err)
		}
		a.Room, a.AsOf = &v, int64(v.AsOf)
	case opUser:
		v, err := pts[0].stage(stageUser).Agg.User(q.User, q.Window, q.Now)
		if err != nil {
			return fail(err)
		}
		a.User, a.AsOf = &v, int64(v.AsOf)
	case opCheck:
		if s := pts[0].stage(q.Stage); s != nil && s.Thr != nil {
			a.Decisions = s.Thr.Decide(q.Now, q.query()).Decisions
		}
	case opConsume, opJoin:
		a.Allowed = true
		if s := pts[0].stage(q.Stage); s != nil && s.Thr != nil {
			res, recorded, alerts := s.Thr.Consume(q.Now, q.query(), q.ID)
			a.Decisions, a.Allowed, a.Consumed, a.Recorded = res.Decisions, res.Allowed, *res.Consumed, recorded
			if pts[0].fence.acting() { // a crossing recorded as the lease ran out is lost with it
				for _, al := range alerts {
					m.bus.Alert(al)
				}
			}
		}
	case opUnconsume:
		if s := pts[0].stage(q.Stage); s != nil && s.Thr != nil {
			a.Undone = s.Thr.Unconsume(q.query(), q.ID)
		}
	case opActive:
		for _, pt := range pts {
			for _, s := range pt.stages {
				if s.Thr != nil {
					a.Active = append(a.Active, s.Thr.Active(q.Now)...)
				}
			}
		}
	}
	return a
}

// latest is the latest as_of of the overviews.
func latest(sets ...[]aggregator.Overview) int64 {
	t := int64(0)
	for _, s := range sets {
		for _, o := range s {
			t = max(t, int64(o.AsOf))
		}
	}
	return t
}

// seconds is the length of a window (the default if win is "").
func (m *Member) seconds(win string) float64 {
	for i, w := range m.cfg.Windows {
		if w.Name == win || win == "" && i == 0 {
			return w.Size.Seconds()
		}
	}
	return 1
}

// sortActive puts active keys in the order one Set gives them: by policy
// (in the policies' order), then room, then user.
func (m *Member) sortActive(as []throttle.Active) {
	order := m.rules.Load().order
	slices.SortFunc(as, func(a, b throttle.Active) int {
		return cmp.Or(cmp.Compare(order[a.Policy], order[b.Policy]),
			strings.Compare(a.Room, b.Room), strings.Compare(a.User, b.User), cmp.Compare(a.Since, b.Since))
	})
}
