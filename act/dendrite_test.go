package act

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/dendrite"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/matrix"
	"github.com/chatpulse/chatpulse/throttle"
)

// room is a Dendrite homeserver with a room the bot made, its users, the
// policies, and an Actor acting there with the moderation bucket on a
// NATS server of its own.
type testRoom struct {
	t        *testing.T
	hs       *dendrite.Server
	id       string
	bot, mod dendrite.User
	users    map[string]dendrite.User
	set      *throttle.Set
	policies []throttle.Policy
	bucket   *bus.Bucket
	client   *matrix.Client
}

const penalty = 3 * time.Second

func newTestRoom(t *testing.T) *testRoom {
	t.Helper()
	tools := dendrite.Need(t)
	url := natstest.Start(t).URL()
	hs, err := dendrite.Start(tools, t.TempDir(), url, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hs.Stop)
	r := &testRoom{t: t, hs: hs, users: map[string]dendrite.User{}}
	if r.bot, err = hs.Register("chatpulse"); err != nil {
		t.Fatal(err)
	}
	if r.id, err = hs.CreateRoom(r.bot, "lobby"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mod", "alice", "bob", "carol", "dave", "erin", "frank"} {
		u, err := hs.Register(name)
		if err != nil {
			t.Fatal(err)
		}
		r.users[name] = u
	}
	r.mod = r.users["mod"]
	for _, name := range []string{"mod", "alice", "bob"} {
		if err := hs.Join(r.users[name], r.id); err != nil {
			t.Fatal(err)
		}
	}
	if r.client, err = matrix.NewClient(hs.URL, func() string { return r.bot.Token }, nil); err != nil {
		t.Fatal(err)
	}
	pl, err := r.client.PowerLevels(t.Context(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	pl.SetUser(r.mod.ID, 50) // the room's own moderator
	if _, err := r.client.SetPowerLevels(t.Context(), r.id, pl); err != nil {
		t.Fatal(err)
	}
	r.policies = []throttle.Policy{
		{Name: "user_room_flood", Scope: throttle.ScopeUserInRoom, Algorithm: throttle.AlgSlidingWindow, Limit: 3, Window: penalty, Penalty: penalty, Act: []throttle.ActKind{throttle.ActMute, throttle.ActRedact}},
		{Name: "raid", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgJoinWave, Limit: 2, Window: time.Minute, Act: []throttle.ActKind{throttle.ActLock}, LockFor: penalty},
	}
	if r.set, err = throttle.NewSet(r.policies); err != nil {
		t.Fatal(err)
	}
	b := natstest.Bus(t, url)
	if r.bucket, err = b.Bucket(t.Context(), bus.ModerationBucket, "test", 1); err != nil {
		t.Fatal(err)
	}
	return r
}

// actor starts an Actor on the room's homeserver and bucket, with the
// bucket's act.* keys watched into it, until stop or the test's end.
func (r *testRoom) actor(p *acts) (a *Actor, stop func()) {
	a = New(Config{Homeserver: r.client, Bucket: r.bucket, Publish: p.publish,
		Policies: func() []throttle.Policy { return r.policies }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	w, err := r.bucket.Watch(ctx, bus.ActKeys+">")
	if err != nil {
		r.t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() {
		for e := range w {
			a.Kept(e)
		}
		done <- struct{}{}
	}()
	go func() { a.Run(ctx); done <- struct{}{} }()
	var once bool
	stop = func() {
		if !once {
			once = true
			cancel()
			<-done
			<-done
		}
	}
	r.t.Cleanup(stop)
	return a, stop
}

// say has user send n messages and returns their events, as chatpulse
// reads them off the bus.
func (r *testRoom) say(user string, n int) []chat.Event {
	r.t.Helper()
	var evs []chat.Event
	at := time.Now().UnixMilli() // one instant for the burst: however slow the homeserver, it is one burst
	for i := range n {
		id, err := r.hs.Send(r.users[user], r.id, "m.room.message", map[string]any{"msgtype": "m.text", "body": fmt.Sprint("hi ", i)})
		if err != nil {
			r.t.Fatal(err)
		}
		evs = append(evs, chat.Event{Kind: chat.KindMessage, ID: id, Room: r.id, User: r.users[user].ID, TS: at})
	}
	return evs
}

// observe feeds evs to the policies, as the pipeline does, and the
// messages over them to a.
func (r *testRoom) observe(a *Actor, evs []chat.Event) {
	r.set.ObserveBatch(evs, nil, func(_ int, o throttle.Over) { a.Over("", o) })
}

// canSend reports whether user may post in the room now.
func (r *testRoom) canSend(user string) bool {
	_, err := r.hs.Send(r.users[user], r.id, "m.room.message", map[string]any{"msgtype": "m.text", "body": "may I?"})
	return err == nil
}

// redacted reports whether event was redacted.
func (r *testRoom) redacted(event string) bool {
	var ev struct {
		Content  map[string]any `json:"content"`
		Unsigned struct {
			RedactedBecause any `json:"redacted_because"`
		} `json:"unsigned"`
	}
	if err := r.hs.Call("GET", dendrite.RoomPath(r.id)+"/event/"+url.PathEscape(event), r.bot.Token, nil, &ev); err != nil {
		r.t.Fatal(err)
	}
	return ev.Unsigned.RedactedBecause != nil
}

// usersOf is the users of the room's power levels.
func (r *testRoom) usersOf() map[string]int {
	var pl struct{ Users map[string]int }
	if err := r.hs.Call("GET", dendrite.RoomPath(r.id)+"/state/m.room.power_levels/", r.bot.Token, nil, &pl); err != nil {
		r.t.Fatal(err)
	}
	return pl.Users
}

// A flood on a real homeserver: the flooder is muted while the policy
// denies them, and exactly unmuted after; each message from the crossing
// on is redacted, none before; a moderator who floods is neither muted
// nor redacted. Everything checked through the client-server API.
func TestActOnDendrite(t *testing.T) {
	r := newTestRoom(t)
	p := &acts{}
	a, _ := r.actor(p)
	alice := r.say("alice", 5)
	mod := r.say("mod", 5)
	r.observe(a, append(append([]chat.Event{}, alice...), mod...))

	wait.For(t, 20*time.Second, func() error {
		if len(p.of(Mute)) != 2 || len(p.of(Redact)) != 2 {
			return fmt.Errorf("published %d mutes, %d redactions", len(p.of(Mute)), len(p.of(Redact)))
		}
		return nil
	})
	for _, m := range p.of(Mute) {
		switch m.User {
		case r.users["alice"].ID:
			if m.Event == "" || m.Until == nil || m.Skipped != "" || len(m.Answered) != 1 || m.Answered[0] != alice[3].ID {
				t.Errorf("alice's mute: %+v", m)
			}
		case r.mod.ID:
			if m.Skipped != "moderator" {
				t.Errorf("the moderator's mute: %+v, want skipped as a moderator", m)
			}
		}
	}
	if level, ok := r.usersOf()[r.users["alice"].ID]; !ok || level != -1 {
		t.Errorf("alice's level while muted: %d (set %v), want -1", level, ok)
	}
	if r.canSend("alice") {
		t.Error("alice can post while muted")
	}
	if !r.canSend("bob") {
		t.Error("bob cannot post: the mute caught him too")
	}
	for i, ev := range alice {
		if got, want := r.redacted(ev.ID), i >= 3; got != want {
			t.Errorf("alice's message %d redacted: %v, want %v (the crossing is the 4th)", i, got, want)
		}
	}
	for i, ev := range mod {
		if r.redacted(ev.ID) {
			t.Errorf("the moderator's message %d redacted", i)
		}
	}
	if got := r.usersOf()[r.mod.ID]; got != 50 {
		t.Errorf("the moderator's level %d, want 50", got)
	}
	if st := a.Status(); len(st.Pending) != 1 || st.Pending[0].Kind != Unmute || st.Pending[0].User != r.users["alice"].ID {
		t.Errorf("pending: %+v", st.Pending)
	}

	// The penalty ends: alice is unmuted, her entry gone as it was.
	wait.For(t, 20*time.Second, func() error {
		if u := p.of(Unmute); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("unmutes %+v", u)
		}
		return nil
	})
	if level, ok := r.usersOf()[r.users["alice"].ID]; ok {
		t.Errorf("alice's level after the unmute: %d; want no entry, as before", level)
	}
	if !r.canSend("alice") {
		t.Error("alice cannot post once unmuted")
	}
}

// A join wave locks the room (join rule invite) and lock_for after its
// crossing the join rules are put back exactly.
func TestLockOnDendrite(t *testing.T) {
	r := newTestRoom(t)
	p := &acts{}
	a, _ := r.actor(p)
	before := r.joinRules()
	var joins []chat.Event
	for _, name := range []string{"carol", "dave", "erin"} {
		if err := r.hs.Join(r.users[name], r.id); err != nil {
			t.Fatal(err)
		}
		joins = append(joins, chat.Event{Kind: chat.KindJoin, Room: r.id, User: r.users[name].ID, ID: "$join-" + name, TS: time.Now().UnixMilli()})
	}
	r.observe(a, joins)
	wait.For(t, 20*time.Second, func() error {
		if l := p.of(Lock); len(l) != 1 || l[0].Event == "" {
			return fmt.Errorf("locks %+v", l)
		}
		return nil
	})
	if rule := joinRule(r.joinRules()); rule != "invite" {
		t.Errorf("join rule while locked: %s", rule)
	}
	if err := r.hs.Join(r.users["frank"], r.id); err == nil {
		t.Error("frank joined a locked room")
	}
	wait.For(t, 20*time.Second, func() error {
		if u := p.of(Unlock); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("unlocks %+v", u)
		}
		return nil
	})
	if after := r.joinRules(); string(after) != string(before) {
		t.Errorf("join rules put back as %s, were %s", after, before)
	}
	if err := r.hs.Join(r.users["frank"], r.id); err != nil {
		t.Errorf("frank cannot join once unlocked: %v", err)
	}
}

// An undo kept before a restart is done by the next run, once: the mute
// of one run, stopped before it was due, is undone by the next, which
// read its record from the bucket.
func TestUndoAcrossARestart(t *testing.T) {
	r := newTestRoom(t)
	first := &acts{}
	a, stop := r.actor(first)
	r.observe(a, r.say("alice", 4))
	wait.For(t, 20*time.Second, func() error {
		if m := first.of(Mute); len(m) != 1 || m[0].Event == "" {
			return fmt.Errorf("mutes %+v", m)
		}
		return nil
	})
	stop()
	if len(first.of(Unmute)) != 0 {
		t.Fatal("unmuted before it was due")
	}
	next := &acts{}
	b, _ := r.actor(next)
	wait.For(t, 20*time.Second, func() error {
		if u := next.of(Unmute); len(u) != 1 || u[0].Event == "" {
			return fmt.Errorf("unmutes %+v", u)
		}
		return nil
	})
	if _, ok := r.usersOf()[r.users["alice"].ID]; ok || !r.canSend("alice") {
		t.Error("alice is still muted after the next run's unmute")
	}
	wait.For(t, 10*time.Second, func() error {
		if n := len(b.Status().Pending); n != 0 {
			return fmt.Errorf("%d undos pending", n)
		}
		return nil
	})
	if len(next.of(Unmute)) != 1 {
		t.Errorf("unmutes: %+v", next.of(Unmute))
	}
}

// joinRules is the room's m.room.join_rules content, as the homeserver
// has it.
func (r *testRoom) joinRules() json.RawMessage {
	c, err := r.client.JoinRules(r.t.Context(), r.id)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}
