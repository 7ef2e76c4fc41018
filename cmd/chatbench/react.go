package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/act"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/internal/dendrite"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// react measures how fast chatpulse --act matrix stops a flood on a real
// Dendrite (docs/contract.md section 14), against the same floods through
// Dendrite with nothing acting.
//
// Each flood is a fresh user posting limit+over messages into a room, one
// after the other, as fast as Dendrite takes them. The limit+1-th crosses
// user_room_flood, which says mute and redact in the acting room only.
// The floods go in pairs, one in each room, so that both see the same
// machine. chatbench reads Dendrite's stream itself (a plain
// subscription: when each event reached the bus, and its
// origin_server_ts) and chatpulse.act.> (what chatpulse did). It measures:
//
//   - the reaction: from the crossing message on the bus, and from its
//     origin_server_ts, to the mute's event's origin_server_ts (the
//     homeserver made the mute); from the crossing on the bus to the
//     mute on the bus (both on chatbench's clock), and to chatpulse's
//     act message (published once the homeserver answered);
//   - the over-limit messages readable in the room, and for how long:
//     from each one's origin_server_ts to its redaction's. In the
//     baseline room every one stays.
func reactCmd(args []string) error {
	fs := flag.NewFlagSet("react", flag.ExitOnError)
	n := fs.Int("n", 100, "floods in each room, each from a fresh user")
	limit := fs.Int("limit", 10, "the policy's limit, in its window of 10s")
	over := fs.Int("over", 5, "messages each flood sends past the limit")
	penalty := fs.Duration("penalty", time.Minute, "the policy's penalty: how long a flooder stays muted")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	fs.Parse(args)
	if *n < 1 || *limit < 1 || *over < 1 {
		return errors.New("-n, -limit and -over: at least 1")
	}
	mb, err := startMatrix("react", bin)
	if err != nil {
		return err
	}
	defer mb.stop()
	hs := mb.hs

	// The rooms are the bot's, so it has the power to act in them.
	bot, err := hs.Register("chatpulse")
	if err != nil {
		return err
	}
	acting, err := hs.CreateRoom(bot, "acting")
	if err != nil {
		return err
	}
	baseline, err := hs.CreateRoom(bot, "baseline")
	if err != nil {
		return err
	}
	token, policies := filepath.Join(mb.dir, "token"), filepath.Join(mb.dir, "policies.yaml")
	if err := os.WriteFile(token, []byte(bot.Token+"\n"), 0o600); err != nil {
		return err
	}
	policy := fmt.Sprintf("policies:\n  - name: user_room_flood\n    scope: user_in_room\n    algorithm: sliding_window\n    limit: %d\n    window: 10s\n    penalty: %s\n    act: [mute, redact]\n    rooms: [%q]\n",
		*limit, *penalty, acting)
	if err := os.WriteFile(policies, []byte(policy), 0o644); err != nil {
		return err
	}
	rec, err := record(mb.nc, mb.js)
	if err != nil {
		return err
	}
	p, err := mb.chatpulse("--policies", policies, "--act", "matrix", "--matrix-homeserver", hs.URL, "--matrix-token-file", token)
	if err != nil {
		return err
	}
	defer p.stop()

	// Every flooder registered and joined before the first flood, and a
	// tenth more for the floods that go wrong (Dendrite answers a send
	// with a 500 now and then on this machine): such a flood is left out,
	// said so, and done again by fresh users.
	users := make([][2]dendrite.User, *n+*n/10+1)
	for i := range users {
		for j, room := range []string{acting, baseline} {
			u, err := hs.Register(fmt.Sprintf("flooder%d-%d", i, j))
			if err == nil {
				err = hs.Join(u, room)
			}
			if err != nil {
				return err
			}
			users[i][j] = u
		}
	}

	load := loadavg()
	msgs := *limit + *over
	var acted, base []floodResult
	left := 0
	for i := 0; len(acted) < *n || len(base) < *n; i++ {
		if i == len(users) {
			return errors.New("too many floods went wrong")
		}
		for _, f := range []struct {
			name   string
			user   dendrite.User
			room   string
			acting bool
			into   *[]floodResult
		}{{"baseline", users[i][1], baseline, false, &base}, {"acting", users[i][0], acting, true, &acted}} {
			if len(*f.into) == *n {
				continue
			}
			r, err := flood(hs, rec, f.user, f.room, msgs, *limit, f.acting)
			if err != nil {
				left++
				fmt.Fprintf(os.Stderr, "%s flood %d left out: %v\n", f.name, i, err)
				continue
			}
			*f.into = append(*f.into, r)
		}
	}
	reportReaction(acted, base, msgs, *limit, *over, load, loadavg())
	if left > 0 {
		fmt.Printf("%d floods left out, and done again by fresh users: they went wrong (on stderr)\n", left)
	}
	return nil
}

// A busEvent is a room event as chatbench read it on Dendrite's stream.
type busEvent struct {
	arrived time.Time // when it reached chatbench's subscription
	ts      int64     // its origin_server_ts, Unix ms
}

// recorder keeps what chatbench read on the bus: the room events by id,
// and chatpulse's acts.
type recorder struct {
	mu     sync.Mutex
	events map[string]busEvent
	acts   []act.Act
}

// record subscribes to Dendrite's stream's subjects, and to
// chatpulse.act.>.
func record(nc *nats.Conn, js jetstream.JetStream) (*recorder, error) {
	s, err := js.Stream(context.Background(), dendrite.Stream)
	if err != nil {
		return nil, err
	}
	r := &recorder{events: map[string]busEvent{}}
	for _, subject := range s.CachedInfo().Config.Subjects {
		if _, err := nc.Subscribe(subject, r.event); err != nil {
			return nil, err
		}
	}
	if _, err := nc.Subscribe(bus.ActPrefix+">", r.act); err != nil {
		return nil, err
	}
	return r, nc.Flush()
}

// event notes a room event of Dendrite's (docs/input.md: its envelope).
func (r *recorder) event(m *nats.Msg) {
	arrived := time.Now()
	var env struct {
		NewRoomEvent struct {
			Event struct {
				ID  string `json:"_event_id"`
				ID2 string `json:"event_id"`
				TS  int64  `json:"origin_server_ts"`
			} `json:"event"`
		} `json:"new_room_event"`
	}
	if json.Unmarshal(m.Data, &env) != nil {
		return
	}
	e := env.NewRoomEvent.Event
	id := cmp.Or(e.ID, e.ID2)
	if id == "" {
		return
	}
	r.mu.Lock()
	r.events[id] = busEvent{arrived, e.TS}
	r.mu.Unlock()
}

func (r *recorder) act(m *nats.Msg) {
	var a act.Act
	if json.Unmarshal(m.Data, &a) != nil {
		return
	}
	r.mu.Lock()
	r.acts = append(r.acts, a)
	r.mu.Unlock()
}

// seen is the event id on the bus, if it came.
func (r *recorder) seen(id string) (busEvent, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.events[id]
	return e, ok
}

// find is the first act of kind that answers event (any, if ""), on user.
func (r *recorder) find(kind act.Kind, user, event string) (act.Act, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.acts {
		if a.Kind == kind && a.User == user && (event == "" || len(a.Answered) > 0 && a.Answered[0] == event) {
			return a, true
		}
	}
	return act.Act{}, false
}

// floodResult is what one flood did.
type floodResult struct {
	reachedBus int // messages that reached the room and the bus
	refused    int // sends the homeserver refused (the user was muted)
	dropped    int // sends it took and never put in the room (a race with the mute)
	readable   int // over-limit messages that reached the room
	// The rest of the flood: from the crossing message on the bus to
	// its last message on the bus.
	rest time.Duration
	// Acting only: the reaction, from the crossing message on the bus to
	// the mute's origin_server_ts, and to the mute on the bus; from the
	// crossing's origin_server_ts to the mute's; and from the crossing on
	// the bus to chatpulse's act message.
	fromBus, onBus, fromTS, toAct time.Duration
	// How long each over-limit message was readable: from its
	// origin_server_ts to its redaction's.
	shown []time.Duration
}

// flood has u post msgs messages into room, one after the other, and
// waits until they are on the bus and, acting, until chatpulse has muted
// u and redacted each of them over the limit that reached the room.
func flood(hs *dendrite.Server, rec *recorder, u dendrite.User, room string, msgs, limit int, acting bool) (floodResult, error) {
	var res floodResult
	var taken []string // the ids the homeserver gave, in order
	for i := range msgs {
		id, err := hs.Send(u, room, "m.room.message", map[string]any{"msgtype": "m.text", "body": fmt.Sprint("flood ", i)})
		switch {
		case err == nil:
			taken = append(taken, id)
		case strings.Contains(err.Error(), "403"):
			res.refused++
		default:
			return res, err
		}
	}
	var mute act.Act
	if acting {
		err := wait.Until(30*time.Second, func() error {
			var ok bool
			if mute, ok = rec.find(act.Mute, u.ID, ""); !ok {
				return fmt.Errorf("no mute of %s in 30 s", u.ID)
			}
			if _, ok = rec.seen(mute.Event); !ok {
				return fmt.Errorf("the mute's event %s not on the bus in 30 s", mute.Event)
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		if mute.Skipped != "" || len(mute.Answered) == 0 {
			return res, fmt.Errorf("the mute of %s: %+v", u.ID, mute)
		}
	}
	// A send the homeserver took may never reach the room, if it raced
	// the mute: those it has not published 2 s on are counted dropped.
	wait.Until(2*time.Second, func() error {
		for _, id := range taken {
			if _, ok := rec.seen(id); !ok {
				return errors.New("not yet")
			}
		}
		return nil
	})
	var onBus []string
	for _, id := range taken {
		if _, ok := rec.seen(id); ok {
			onBus = append(onBus, id)
		}
	}
	res.reachedBus, res.dropped = len(onBus), len(taken)-len(onBus)
	if len(onBus) <= limit {
		return res, fmt.Errorf("%d of %d messages reached the bus: none over the limit of %d", len(onBus), msgs, limit)
	}
	overLimit := onBus[limit:]
	res.readable = len(overLimit)
	crossing, _ := rec.seen(overLimit[0])
	last, _ := rec.seen(onBus[len(onBus)-1])
	res.rest = last.arrived.Sub(crossing.arrived)
	if !acting {
		return res, nil
	}
	if mute.Answered[0] != overLimit[0] {
		return res, fmt.Errorf("the mute answers %s, the crossing message is %s", mute.Answered[0], overLimit[0])
	}
	muted, _ := rec.seen(mute.Event)
	res.fromBus = time.UnixMilli(muted.ts).Sub(crossing.arrived)
	res.onBus = muted.arrived.Sub(crossing.arrived)
	res.fromTS = time.Duration(muted.ts-crossing.ts) * time.Millisecond
	res.toAct = time.UnixMilli(int64(mute.At)).Sub(crossing.arrived)
	for _, id := range overLimit {
		var red busEvent
		err := wait.Until(30*time.Second, func() error {
			a, ok := rec.find(act.Redact, u.ID, id)
			switch {
			case !ok:
				return fmt.Errorf("%s not redacted in 30 s", id)
			case a.Event == "":
				return fmt.Errorf("the redaction of %s: %+v", id, a)
			}
			if red, ok = rec.seen(a.Event); !ok {
				return fmt.Errorf("the redaction of %s not on the bus in 30 s", id)
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		msg, _ := rec.seen(id)
		res.shown = append(res.shown, time.Duration(red.ts-msg.ts)*time.Millisecond)
	}
	return res, nil
}

// reportReaction prints the reaction, and the over-limit messages readable,
// acting and in the baseline side by side.
func reportReaction(acted, base []floodResult, msgs, limit, over int, loadBefore, loadAfter string) {
	var fromBus, onBus, fromTS, toAct, shown []time.Duration
	for _, r := range acted {
		fromBus, onBus, fromTS, toAct = append(fromBus, r.fromBus), append(onBus, r.onBus), append(fromTS, r.fromTS), append(toAct, r.toAct)
		shown = append(shown, r.shown...)
	}
	q := func(ds []time.Duration) string {
		p := percentiles(ds, 0.50, 0.99, 1)
		return fmt.Sprintf("p50 %v, p99 %v, max %v", p[0].Round(time.Millisecond), p[1].Round(time.Millisecond), p[2].Round(time.Millisecond))
	}
	fmt.Printf("%d floods in each room, one at a time, each a fresh user posting %d messages as fast as Dendrite takes them;\n", len(acted), msgs)
	fmt.Printf("user_room_flood: limit %d in 10s, so message %d crosses; the %d from it on are over the limit.\n", limit, limit+1, over)
	fmt.Printf("load average before: %s; after: %s\n\n", loadBefore, loadAfter)
	fmt.Println("reaction, acting:")
	fmt.Printf("  crossing message on the bus -> the mute's origin_server_ts:  %s\n", q(fromBus))
	fmt.Printf("  crossing's origin_server_ts -> the mute's origin_server_ts: %s\n", q(fromTS))
	fmt.Printf("  crossing message on the bus -> the mute on the bus:          %s\n", q(onBus))
	fmt.Printf("  crossing message on the bus -> chatpulse's act message:     %s\n\n", q(toAct))
	row := func(what, acting, baseline string) { fmt.Printf("%-50s %-38s %s\n", what, acting, baseline) }
	row("", "acting", "baseline (nothing acts)")
	row("over-limit messages sent", fmt.Sprint(len(acted)*over), fmt.Sprint(len(base)*over))
	row("  that reached the room", readable(acted), readable(base))
	row("  readable for (to their redaction)", q(shown), "until the end: none redacted")
	row("  refused by the mute", fmt.Sprint(total(acted, func(r floodResult) int { return r.refused })), fmt.Sprint(total(base, func(r floodResult) int { return r.refused })))
	row("  taken, never in the room (raced the mute)", fmt.Sprint(total(acted, func(r floodResult) int { return r.dropped })), fmt.Sprint(total(base, func(r floodResult) int { return r.dropped })))
	rest := func(rs []floodResult) string {
		ds := make([]time.Duration, len(rs))
		for i, r := range rs {
			ds[i] = r.rest
		}
		return q(ds)
	}
	row("crossing -> the flood's last message, on the bus", rest(acted), rest(base))
}

// readable says how many over-limit messages reached the room, in all
// and per flood.
func readable(rs []floodResult) string {
	per := make([]int, len(rs))
	for i, r := range rs {
		per[i] = r.readable
	}
	slices.Sort(per)
	at := func(p float64) int { return per[min(len(per)-1, int(p*float64(len(per))))] }
	return fmt.Sprintf("%d (a flood: p50 %d, max %d)", total(rs, func(r floodResult) int { return r.readable }), at(0.5), at(1))
}

func total(rs []floodResult, f func(floodResult) int) int {
	t := 0
	for _, r := range rs {
		t += f(r)
	}
	return t
}

// loadavg is the machine's load average over 1, 5 and 15 minutes.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
