// Package traffic makes synthetic chat traffic: rooms and users with skewed
// (Zipf) activity, events shaped as the contract's section 1 says, a share
// of bad ones and of joins (section 12) on request, and, for the demo, a
// user who floods now and then.
// cmd/chatgen and chatpulse --demo both use it, so the demo exercises the
// same path as real traffic: it only publishes, through a function given to
// it, and knows nothing of chatpulse's internals.
package traffic

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

// Config of a generator.
type Config struct {
	Rooms, Users int
	Rate         float64       // events per second
	Duration     time.Duration // 0: until the context is done
	BadRatio     float64       // share of malformed or invalid events, 0..1
	Prefix       string        // events go to <Prefix>.<room>.<user>
	Seed         uint64
	Flood        bool    // now and then one user floods a room, to trip the throttle
	Friendly     bool    // names like lobby and alice for the busiest rooms and users
	Wave         bool    // the rate swings by half over a minute, as real traffic does
	Flatten      float64 // the Zipf v of users (1 if unset): larger gives the busiest users less
	JoinEvery    int     // > 0: one join (docs/contract.md section 12) after every JoinEvery other events
	Now          func() time.Time
}

// Demo is lively traffic for chatpulse --demo: a few busy rooms, a long
// tail, a flood every 20 seconds or so, and a join now and then.
func Demo() Config {
	return Config{Rooms: 60, Users: 3000, Rate: 150, Prefix: "chat", Seed: uint64(time.Now().UnixNano()),
		Flood: true, Friendly: true, Wave: true, Flatten: 40, JoinEvery: 40}
}

// Counts is what a generator sent.
type Counts struct {
	Sent  int            `json:"sent"`
	Good  int            `json:"good"` // events chatpulse should count, joins included
	Bad   int            `json:"bad"`
	Joins int            `json:"joins,omitempty"`
	Rooms map[string]int `json:"rooms"` // good messages per room
	Users map[string]int `json:"users"` // good messages per user
}

// Generator makes events.
type Generator struct {
	cfg    Config
	r      *rand.Rand
	rooms  []string
	users  []string
	member [][]int // the rooms each user talks in
	zipf   *rand.Zipf
	seq    int
	buf    []byte

	flooder   int       // user flooding, or -1
	floodRoom int       // where
	floodLeft int       // messages left in the flood
	nextFlood time.Time // when the next flood starts
}

var (
	friendlyRooms = []string{"lobby", "random", "dev", "support-eu", "gaming", "music", "support-us", "design", "ops", "memes"}
	friendlyUsers = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "yara"}
	words         = []string{"hi", "hello", "anyone", "seen", "the", "new", "build", "deploy", "is", "green", "again", "lunch", "?", "thanks", "great", "idea", "let's", "ship", "it", "today", "bug", "fixed", "works", "for", "me", "lol", "brb", "meeting", "in", "five", "minutes", "coffee", "please", "review", "my", "PR"}
)

// New returns a generator; Rooms and Users default to 100 and 10,000.
func New(cfg Config) *Generator {
	if cfg.Rooms < 1 {
		cfg.Rooms = 100
	}
	if cfg.Users < 1 {
		cfg.Users = 10_000
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "chat"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Generator{cfg: cfg, r: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), flooder: -1}
	for i := range cfg.Rooms {
		if cfg.Friendly && i < len(friendlyRooms) {
			g.rooms = append(g.rooms, friendlyRooms[i])
		} else {
			g.rooms = append(g.rooms, "room-"+strconv.Itoa(i))
		}
	}
	roomZipf := rand.NewZipf(g.r, 1.3, 1, uint64(cfg.Rooms-1))
	for i := range cfg.Users {
		if cfg.Friendly && i < len(friendlyUsers) {
			g.users = append(g.users, friendlyUsers[i])
		} else {
			g.users = append(g.users, "user-"+strconv.Itoa(i))
		}
		var rooms []int
		for range 1 + g.r.IntN(3) {
			rooms = append(rooms, int(roomZipf.Uint64()))
		}
		g.member = append(g.member, rooms)
	}
	g.zipf = rand.NewZipf(g.r, 1.1, max(cfg.Flatten, 1), uint64(cfg.Users-1))
	return g
}

// Next makes one event at time now: its subject and payload, and for a good
// event its room and user (bad ones have good == false).
func (g *Generator) Next(now time.Time) (subject string, payload []byte, room, user string, good bool) {
	g.seq++
	u := int(g.zipf.Uint64())
	ri := g.member[u][g.r.IntN(len(g.member[u]))]
	if g.cfg.Flood {
		u, ri = g.flood(now, u, ri)
	}
	room, user = g.rooms[ri], g.users[u]
	subject = g.cfg.Prefix + "." + chat.Token(room) + "." + chat.Token(user) // the subject rule of group mode
	if g.joining() {
		return subject, g.join(now.UnixMilli(), room, user), room, user, true
	}
	if g.cfg.BadRatio > 0 && g.r.Float64() < g.cfg.BadRatio {
		return subject, g.bad(now, room, user), "", "", false
	}
	return subject, g.event(now.UnixMilli(), room, user, g.text(u == g.flooder)), room, user, true
}

// joining reports whether the event being made is a join.
func (g *Generator) joining() bool {
	return g.cfg.JoinEvery > 0 && g.seq%(g.cfg.JoinEvery+1) == 0
}

// flood starts a flood every 20 s or so and, while one runs, makes every
// third event a message of the flooder, 14 in all: over the default
// 10-in-10s policy, and repeating itself.
func (g *Generator) flood(now time.Time, u, ri int) (int, int) {
	if g.nextFlood.IsZero() {
		g.nextFlood = now.Add(3 * time.Second)
	}
	if g.floodLeft == 0 && !now.Before(g.nextFlood) {
		g.flooder, g.floodRoom, g.floodLeft = g.r.IntN(min(len(g.users), 20)), 0, 14
		g.nextFlood = now.Add(time.Duration(15+g.r.IntN(10)) * time.Second)
	}
	if g.floodLeft > 0 && g.seq%3 == 0 {
		g.floodLeft--
		return g.flooder, g.floodRoom
	}
	return u, ri
}

func (g *Generator) text(flooding bool) string {
	if flooding {
		return "BUY CHEAP GOLD NOW!!! visit example.com"
	}
	n := 3 + g.r.IntN(8)
	b := make([]byte, 0, 64)
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[g.r.IntN(len(words))]...)
	}
	return string(b)
}

// event is a good event's JSON, about 150 bytes.
func (g *Generator) event(ts int64, room, user, text string) []byte {
	b := g.buf[:0]
	b = append(b, `{"id":"m-`...)
	b = strconv.AppendInt(b, int64(g.seq), 10)
	b = append(b, `","room":"`...)
	b = append(b, room...)
	b = append(b, `","user":"`...)
	b = append(b, user...)
	b = append(b, `","ts":"`...)
	b = chat.Time(ts).AppendFormat(b)
	b = append(b, `","text":"`...)
	b = append(b, text...)
	b = append(b, `"}`...)
	g.buf = b
	return append([]byte(nil), b...)
}

// join is a join's JSON.
func (g *Generator) join(ts int64, room, user string) []byte {
	b := g.buf[:0]
	b = append(b, `{"id":"j-`...)
	b = strconv.AppendInt(b, int64(g.seq), 10)
	b = append(b, `","type":"join","room":"`...)
	b = append(b, room...)
	b = append(b, `","user":"`...)
	b = append(b, user...)
	b = append(b, `","ts":"`...)
	b = chat.Time(ts).AppendFormat(b)
	b = append(b, `"}`...)
	g.buf = b
	return append([]byte(nil), b...)
}

// bad makes an event chatpulse must reject, of one of several kinds.
func (g *Generator) bad(now time.Time, room, user string) []byte {
	switch g.r.IntN(4) {
	case 0: // malformed: cut short
		e := g.event(now.UnixMilli(), room, user, "oops")
		return e[:len(e)/2]
	case 1: // invalid: no room
		return fmt.Appendf(nil, `{"id":"m-%d","user":%q,"text":"where am I"}`, g.seq, user)
	case 2: // invalid: a ts that is no time
		return fmt.Appendf(nil, `{"id":"m-%d","room":%q,"user":%q,"ts":"yesterday"}`, g.seq, room, user)
	default: // future: an hour ahead
		return g.event(now.Add(time.Hour).UnixMilli(), room, user, "from the future")
	}
}

// sent is how many events are due after t seconds: the rate's integral.
// With Wave the rate is Rate·(1 + sin(2πt/60)/2).
func (g *Generator) sent(t float64) float64 {
	if !g.cfg.Wave {
		return g.cfg.Rate * t
	}
	const period = 60.0
	return g.cfg.Rate * (t + period/(4*math.Pi)*(1-math.Cos(2*math.Pi*t/period)))
}

// Run publishes at the configured rate until Duration has passed or ctx is
// done, and says what it sent.
func (g *Generator) Run(ctx context.Context, publish func(subject string, data []byte) error) (Counts, error) {
	c := Counts{Rooms: map[string]int{}, Users: map[string]int{}}
	start := g.cfg.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		now := g.cfg.Now()
		elapsed := now.Sub(start)
		if g.cfg.Duration > 0 && elapsed >= g.cfg.Duration {
			elapsed = g.cfg.Duration
		}
		due := int(g.sent(elapsed.Seconds()))
		for c.Sent < due {
			subject, data, room, user, good := g.Next(now)
			if err := publish(subject, data); err != nil {
				return c, err
			}
			c.Sent++
			switch {
			case good && g.joining():
				c.Good++
				c.Joins++
			case good:
				c.Good++
				c.Rooms[room]++
				c.Users[user]++
			default:
				c.Bad++
			}
		}
		if g.cfg.Duration > 0 && elapsed >= g.cfg.Duration {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-tick.C:
		}
	}
}
