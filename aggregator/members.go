package aggregator

import (
	"fmt"
	"strings"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/snapshot"
)

// Membership (docs/contract.md section 12). A join of a user already
// joined is no join: a Matrix display name or avatar change is a member
// event with membership "join", and a client that reconnects may say
// "join" again. No event says what the membership was before it, so the
// aggregator remembers, per (room, user), the last join or leave it was
// given and when, and counts a join or a leave only if it changes that.
// The rule is a function of the events of the (room, user) in stream
// order alone, not of the clock:
//
//	a join (leave) is a repeat, counted nowhere, if the last join or
//	leave of its room and user before it was a join (leave) whose ts is
//	less than the horizon H (the largest window) before its own.
//
// So a leave of a user never seen to join is a leave, and so is a join
// after a leave or after the last join fell out of the horizon. Every
// join and leave sets the (room, user)'s last membership, late ones too:
// an event that a replay finds older than every window was perhaps not
// when it first came, and what follows must be decided as it was then.
//
// Memory: an entry (the user's name, a ts and a flag, in its room's map)
// is dropped once the clock is H + L past its ts (L, the largest window,
// is also H): an event it could still make a repeat is then older than
// every window, counted nowhere whatever it is. Entries are dropped a
// sweep at a time, each quarter of that after the last, so a member
// costs one entry for at most 2.5 largest windows after its last join
// or leave. The rule holds whatever the sweeps' timing, which is why a
// snapshot (which holds the entries) followed by the stream read again
// decides as the run it was taken from did. A state writes the entries
// at StartState, under the lock, as it writes the crowds: a few bytes
// and a map read each.
type members struct {
	rooms   map[string]map[string]membership
	n       int   // entries
	horizon int64 // H, ms: the largest window
	sweepAt int64 // the clock at which to sweep next
	peak    int   // of rooms, for shrunk
}

// A membership is the last join or leave of a (room, user).
type membership struct {
	ts     int64
	joined bool
}

func newMembers(horizon int64) members {
	return members{rooms: make(map[string]map[string]membership), horizon: horizon, sweepAt: chat.Never}
}

// changes records the join or leave ev as its (room, user)'s last
// membership, and reports whether it changed the one before (the rule
// above). An event already as old as an entry is kept (a late one, at
// clock) makes the (room, user) forgotten instead: it can decide nothing
// more, and nor can what it replaced.
func (m *members) changes(ev *chat.Event, clock int64) bool {
	if ev.Kind != chat.KindJoin && ev.Kind != chat.KindLeave {
		return false
	}
	joined := ev.Kind == chat.KindJoin
	users := m.rooms[ev.Room]
	prev, known := users[ev.User]
	switch {
	case clock != chat.Never && clock-ev.TS >= m.keep():
		if known {
			delete(users, ev.User)
			m.n--
			if len(users) == 0 {
				delete(m.rooms, ev.Room)
			}
		}
	case known:
		users[ev.User] = membership{ev.TS, joined}
	default:
		if users == nil {
			users = make(map[string]membership)
			m.rooms[strings.Clone(ev.Room)] = users
			m.peak = max(m.peak, len(m.rooms))
		}
		users[strings.Clone(ev.User)] = membership{ev.TS, joined}
		m.n++
	}
	return !known || prev.joined != joined || ev.TS-prev.ts >= m.horizon
}

// keep is how long after its ts an entry can still change a count.
func (m *members) keep() int64 { return 2 * m.horizon }

// sweep drops the entries that can no longer change a count at clock,
// if a sweep is due.
func (m *members) sweep(clock int64) {
	if clock == chat.Never || clock < m.sweepAt {
		return
	}
	m.sweepAt = clock + m.keep()/4
	for room, users := range m.rooms {
		before := len(users)
		for user, ms := range users {
			if clock-ms.ts >= m.keep() {
				delete(users, user)
				m.n--
			}
		}
		switch peak := before; {
		case len(users) == 0:
			delete(m.rooms, room)
		case len(users) < before:
			m.rooms[room] = shrunk(users, &peak) // a crowd gone gives its room back
		}
	}
	m.rooms = shrunk(m.rooms, &m.peak)
}

// append writes the entries: uvarint rooms; per room its name,
// uvarint entries, and per entry the user's name, varint ts and a byte,
// 1 for a join, 0 for a leave.
func (m *members) append(b []byte) []byte {
	b = snapshot.AppendUvarint(b, uint64(len(m.rooms)))
	for room, users := range m.rooms {
		b = snapshot.AppendString(b, room)
		b = snapshot.AppendUvarint(b, uint64(len(users)))
		for user, ms := range users {
			b = snapshot.AppendString(b, user)
			b = snapshot.AppendVarint(b, ms.ts)
			joined := byte(0)
			if ms.joined {
				joined = 1
			}
			b = append(b, joined)
		}
	}
	return b
}

// load reads what append wrote into m, empty, checking it as hostile, and
// sweeps what is too old at clock.
func (m *members) load(r *snapshot.Reader, clock int64) error {
	// A room takes at least three bytes (a name, a count), an entry four
	// (a name, a ts, a flag).
	nrooms := r.Count(3, "rooms with members")
	for range nrooms {
		room := alias(r)
		n := r.Count(4, "members")
		if r.Err() != nil {
			return r.Err()
		}
		if err := chat.CheckNameLen("room", room, chat.MaxForeignNameLen); err != nil {
			return err
		}
		if n == 0 || m.rooms[room] != nil {
			return fmt.Errorf("members of room %q: %d, or twice", room, n)
		}
		users := make(map[string]membership, n)
		m.rooms[strings.Clone(room)] = users
		for range n {
			user, ts, joined := alias(r), r.Varint(), r.Byte()
			if r.Err() != nil {
				return r.Err()
			}
			if err := chat.CheckNameLen("user", user, chat.MaxForeignNameLen); err != nil {
				return err
			}
			if _, twice := users[user]; twice || joined > 1 || ts < -1<<60 || ts > 1<<60 {
				return fmt.Errorf("member %q of room %q: twice, or ts %d, flag %d", user, room, ts, joined)
			}
			users[strings.Clone(user)] = membership{ts, joined == 1}
			m.n++
		}
	}
	m.peak = len(m.rooms)
	m.sweepAt = chat.Never
	m.sweep(clock)
	return r.Err()
}
