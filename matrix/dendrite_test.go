package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/internal/dendrite"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

var capture = flag.Bool("capture", false, "TestDendrite writes Dendrite's answers to testdata/dendrite (the fuzz targets' seeds)")

// cooloff is how long Dendrite's rate limiter holds each request of a
// client against it; threshold, how many it holds before a 429.
const (
	cooloff   = time.Second
	threshold = 5
)

// homeserver is Dendrite v0.13.8 with its rate limits on, as Dendrite
// ships (here with a cooloff of 1 s), but for the bot, which is exempt
// (client_api.rate_limiting.exempt_user_ids): as an operator should set
// it up for chatpulse.
type homeserver struct {
	*dendrite.Server
	t   *testing.T
	rec *recorder
}

// startHomeserver runs Dendrite on a NATS server of its own until the
// test ends (skipping without Dendrite, as dendrite.Need says).
func startHomeserver(t *testing.T) *homeserver {
	t.Helper()
	tools := dendrite.Need(t)
	out := &logs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Dendrite wrote:\n%s", out.String())
		}
	})
	s, err := dendrite.StartWith(tools, t.TempDir(), natstest.Start(t).URL(), out, func(cfg map[string]any) {
		serverName := cfg["global"].(map[string]any)["server_name"].(string)
		cfg["client_api"].(map[string]any)["rate_limiting"] = map[string]any{
			"enabled": true, "threshold": threshold, "cooloff_ms": cooloff.Milliseconds(),
			"exempt_user_ids": []string{"@chatpulse:" + serverName},
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return &homeserver{Server: s, t: t, rec: &recorder{}}
}

type logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// recorder keeps the answers a Client got, for the test to look at and
// to capture as seeds.
type recorder struct {
	mu      sync.Mutex
	answers []answer
}

type answer struct {
	op     string
	status int
	header http.Header
	body   []byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.answers = append(r.answers, answer{req.Method + " " + req.URL.EscapedPath(), resp.StatusCode, resp.Header, body})
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) last() answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answers[len(r.answers)-1]
}

// keep logs the last answer, and with -capture writes its body to
// testdata/dendrite/name.json.
func (hs *homeserver) keep(t *testing.T, name string) answer {
	t.Helper()
	a := hs.rec.last()
	t.Logf("%s: %s: %d %s", name, a.op, a.status, a.body)
	if *capture {
		if err := os.MkdirAll(filepath.Join("testdata", "dendrite"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "dendrite", name+".json"), a.body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// client is a Client acting as u, its answers recorded.
func (hs *homeserver) client(u dendrite.User) *Client {
	hs.t.Helper()
	c, err := NewClient(hs.URL, func() string { return u.Token }, &http.Client{Transport: hs.rec, Timeout: 30 * time.Second})
	if err != nil {
		hs.t.Fatal(err)
	}
	return c
}

func (hs *homeserver) register(name string) dendrite.User {
	hs.t.Helper()
	u, err := hs.Register(name)
	if err != nil {
		hs.t.Fatal(err)
	}
	return u
}

// createRoom makes a public room of the room version given ("" for
// Dendrite's default, 10) and returns its id: its creator has level 100.
func (hs *homeserver) createRoom(u dendrite.User, name, version string) string {
	hs.t.Helper()
	req := map[string]any{"preset": "public_chat", "name": name}
	if version != "" {
		req["room_version"] = version
	}
	var out struct {
		RoomID string `json:"room_id"`
	}
	if err := hs.Call("POST", "/_matrix/client/v3/createRoom", u.Token, req, &out); err != nil {
		hs.t.Fatal(err)
	}
	return out.RoomID
}

func (hs *homeserver) join(u dendrite.User, room string) {
	hs.t.Helper()
	if err := hs.Join(u, room); err != nil {
		hs.t.Fatal(err)
	}
}

func (hs *homeserver) say(u dendrite.User, room, text string) (string, error) {
	return hs.Send(u, room, "m.room.message", map[string]any{"msgtype": "m.text", "body": text})
}

// state is the content of room's state event of type evType, as u reads
// it through the API (not through the Client under test).
func (hs *homeserver) state(u dendrite.User, room, evType string) map[string]any {
	hs.t.Helper()
	var content map[string]any
	if err := hs.Call("GET", dendrite.RoomPath(room)+"/state/"+evType+"/", u.Token, nil, &content); err != nil {
		hs.t.Fatal(err)
	}
	return content
}

func (hs *homeserver) setState(u dendrite.User, room, evType string, content map[string]any) {
	hs.t.Helper()
	if err := hs.Call("PUT", dendrite.RoomPath(room)+"/state/"+evType+"/", u.Token, content, nil); err != nil {
		hs.t.Fatal(err)
	}
}

// refused fails the test unless err is Dendrite's 403.
func refused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "403 Forbidden") {
		t.Fatalf("%s: want a 403, got %v", what, err)
	}
	t.Logf("%s: refused: %v", what, err)
}

// result is a call's results, held until ok fails the test with its
// error, if there is one: got(c.WhoAmI(ctx)).ok(t).
type result[T any] struct {
	v   T
	err error
}

func got[T any](v T, err error) result[T] { return result[T]{v, err} }

func (r result[T]) ok(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

// muteUnmute mutes u in room as chatpulse does (u's level below what a
// message needs) and sees Dendrite refuse u's message; then it puts back
// what u had (the previous level, or no entry) and sees the power levels
// as they were, every key, and u post again.
func muteUnmute(t *testing.T, hs *homeserver, c *Client, bot, u dendrite.User, room string) {
	t.Helper()
	ctx := context.Background()
	before := hs.state(bot, room, "m.room.power_levels")
	pl := got(c.PowerLevels(ctx, room)).ok(t)
	prev, had := pl.User(u.ID)
	pl.SetUser(u.ID, pl.EventLevel("m.room.message", false)-1)
	got(c.SetPowerLevels(ctx, room, pl)).ok(t)
	_, err := hs.say(u, room, "while muted")
	refused(t, u.ID+"'s message while muted", err)

	pl = got(c.PowerLevels(ctx, room)).ok(t)
	if had {
		pl.SetUser(u.ID, prev)
	} else {
		pl.DeleteUser(u.ID)
	}
	got(c.SetPowerLevels(ctx, room, pl)).ok(t)
	if after := hs.state(bot, room, "m.room.power_levels"); !reflect.DeepEqual(after, before) {
		t.Fatalf("unmuted, the power levels are\n%v\nnot, as before,\n%v", after, before)
	}
	got(hs.say(u, room, "after the mute")).ok(t)
}

// TestDendrite acts on a real Matrix homeserver, Dendrite v0.13.8, as
// chatpulse's bot: it mutes a user and puts back exactly the level it
// had (none, or one), redacts a message, locks a room and puts back its
// join rules, every key, in a room of Dendrite's default version and in
// an old one whose levels are numeric strings and whose event ids hold
// '/' and '+'. A bot without the power gets errors that Forbidden
// reports; Dendrite's rate limits fall on whoami and joins, not on what
// the bot acts with.
func TestDendrite(t *testing.T) {
	hs := startHomeserver(t)
	ctx := context.Background()
	bot, alice, carol := hs.register("chatpulse"), hs.register("alice"), hs.register("carol")
	c := hs.client(bot)
	if id := got(c.WhoAmI(ctx)).ok(t); id != bot.ID {
		t.Fatalf("whoami: %s, want %s", id, bot.ID)
	}
	hs.keep(t, "whoami")

	room := hs.createRoom(bot, "general", "")
	hs.join(alice, room)
	pl := got(c.PowerLevels(ctx, room)).ok(t)
	hs.keep(t, "power_levels")
	if n := pl.UserLevel(bot.ID); n != 100 {
		t.Fatalf("the creator's level is %d", n)
	}
	if n, set := pl.User(alice.ID); set {
		t.Fatalf("alice has a level already: %d", n)
	}

	// Keys chatpulse does not know, as another client or homeserver
	// puts them: they survive every act.
	content := hs.state(bot, room, "m.room.power_levels")
	content["org.chatpulse.test"] = map[string]any{"kept": []any{1, "two", map[string]any{"users": map[string]any{"@x:y": 1}}}}
	content["notifications"] = map[string]any{"room": 20}
	hs.setState(bot, room, "m.room.power_levels", content)
	got(c.PowerLevels(ctx, room)).ok(t)
	hs.keep(t, "power_levels-unknown-keys")

	t.Run("mute", func(t *testing.T) {
		muteUnmute(t, hs, c, bot, alice, room)

		// A user with a level of her own gets it back.
		pl := got(c.PowerLevels(ctx, room)).ok(t)
		pl.SetUser(alice.ID, 10)
		set := got(c.SetPowerLevels(ctx, room, pl)).ok(t)
		// Dendrite answers a state event whose content is the current one
		// with the current event's id, and makes none (not in the spec;
		// Synapse does the same).
		if again := got(c.SetPowerLevels(ctx, room, pl)).ok(t); again != set {
			t.Logf("the same power levels again made a new event: %s after %s", again, set)
		} else {
			t.Logf("the same power levels again: Dendrite answers the current event's id, %s", again)
		}
		muteUnmute(t, hs, c, bot, alice, room)
		if n, _ := got(c.PowerLevels(ctx, room)).ok(t).User(alice.ID); n != 10 {
			t.Fatalf("alice's level is %d after the unmute, not 10", n)
		}
	})

	msg := got(hs.say(alice, room, "spam spam spam")).ok(t)
	t.Run("redact", func(t *testing.T) {
		red := got(c.Redact(ctx, room, msg, "user_room_flood", "chatpulse-1")).ok(t)
		hs.keep(t, "redact")
		if again := got(c.Redact(ctx, room, msg, "user_room_flood", "chatpulse-1")).ok(t); again != red {
			t.Fatalf("the same transaction made a second redaction: %s, then %s", red, again)
		}
		redacted(t, hs, bot, room, msg, red)
		var redaction struct {
			Content struct{ Reason string }
		}
		if err := hs.Call("GET", dendrite.RoomPath(room)+"/event/"+escape(red), bot.Token, nil, &redaction); err != nil || redaction.Content.Reason != "user_room_flood" {
			t.Fatalf("the redaction's reason: %q, %v", redaction.Content.Reason, err)
		}
	})

	t.Run("lock", func(t *testing.T) {
		// Join rules with a key of their own, as a homeserver's
		// extension would have: put back too.
		got(c.SetJoinRules(ctx, room, json.RawMessage(`{"join_rule":"public","org.chatpulse.test":{"kept":[1,"two"]}}`))).ok(t)
		prev := got(c.JoinRules(ctx, room)).ok(t)
		hs.keep(t, "join_rules")
		got(c.SetJoinRules(ctx, room, json.RawMessage(`{"join_rule":"invite"}`))).ok(t)
		refused(t, "carol's join while locked", hs.Join(carol, room))
		got(c.SetJoinRules(ctx, room, prev)).ok(t)
		now := got(c.JoinRules(ctx, room)).ok(t)
		if !bytes.Equal(now, prev) {
			t.Fatalf("join rules put back as %s, not %s", now, prev)
		}
		hs.join(carol, room)
	})

	t.Run("no power", func(t *testing.T) {
		weak := hs.register("weakbot")
		hs.join(weak, room)
		w := hs.client(weak)
		pl := got(w.PowerLevels(ctx, room)).ok(t) // a member reads them
		pl.SetUser(alice.ID, -1)
		_, err := w.SetPowerLevels(ctx, room, pl)
		forbidden(t, hs, "a mute by a member without the power", "error-403-power_levels", err)
		target := got(hs.say(alice, room, "not redacted")).ok(t)
		_, err = w.Redact(ctx, room, target, "x", "weak-1")
		forbidden(t, hs, "a redaction by a member without the power", "error-403-redact", err)
		_, err = w.SetJoinRules(ctx, room, json.RawMessage(`{"join_rule":"invite"}`))
		forbidden(t, hs, "a lock by a member without the power", "error-403-join_rules", err)

		outsider := hs.client(hs.register("outsider"))
		_, err = outsider.PowerLevels(ctx, room)
		forbidden(t, hs, "power levels read by a user not in the room", "error-403-not-joined-state", err)
		_, err = outsider.Redact(ctx, room, target, "x", "outsider-1")
		forbidden(t, hs, "a redaction by a user not in the room", "error-403-not-joined-redact", err)
	})

	t.Run("refusals", func(t *testing.T) {
		// Dendrite answers an unknown event 400 M_NOT_FOUND, where the
		// spec's M_NOT_FOUND is a 404.
		_, err := c.Redact(ctx, room, "$no-such-event", "x", "unknown-1")
		hs.keep(t, "error-400-redact-unknown-event")
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != "M_NOT_FOUND" || Forbidden(err) || Temporary(err) {
			t.Fatalf("redaction of an unknown event: %v", err)
		}
		_, err = c.PowerLevels(ctx, "!no-such-room:localhost")
		hs.keep(t, "error-unknown-room")
		if err == nil || Temporary(err) {
			t.Fatalf("power levels of an unknown room: %v", err)
		}
		const stale = "syt_not_a_token_of_this_homeserver_0123456789"
		bad, _ := NewClient(hs.URL, func() string { return stale }, &http.Client{Transport: hs.rec})
		_, err = bad.WhoAmI(ctx)
		hs.keep(t, "error-401-unknown-token")
		if !Unauthorized(err) || Forbidden(err) || Temporary(err) || strings.Contains(err.Error(), stale) {
			t.Fatalf("an unknown token: %v", err)
		}
		t.Logf("an unknown token: %v", err)
	})

	t.Run("old room", func(t *testing.T) {
		// Room version 3: levels may be numeric strings (integers are
		// enforced from version 10), and event ids are standard base64,
		// with '/' and '+'.
		old := hs.createRoom(bot, "old", "3")
		hs.join(alice, old)
		content := hs.state(bot, old, "m.room.power_levels")
		users := content["users"].(map[string]any)
		users[bot.ID] = "100"
		users["@mod:localhost"] = " 60 "
		content["events_default"] = "0"
		content["events"].(map[string]any)["m.room.message"] = "0"
		content["redact"] = "50"
		hs.setState(bot, old, "m.room.power_levels", content)
		pl := got(c.PowerLevels(ctx, old)).ok(t)
		hs.keep(t, "power_levels-v3-strings")
		if pl.UserLevel(bot.ID) != 100 || pl.UserLevel("@mod:localhost") != 60 || pl.EventLevel("m.room.message", false) != 0 || pl.Redact() != 50 {
			t.Fatalf("numeric strings misread: %s", got(pl.MarshalJSON()).ok(t))
		}
		muteUnmute(t, hs, c, bot, alice, old)
		// From room version 10 on, a numeric string is refused: so
		// chatpulse writes numbers.
		content = hs.state(bot, room, "m.room.power_levels")
		content["users"].(map[string]any)[alice.ID] = "5"
		err := hs.Call("PUT", dendrite.RoomPath(room)+"/state/m.room.power_levels/", bot.Token, content, nil)
		if err == nil {
			t.Fatal("a numeric string accepted in a room of version 10")
		}
		t.Logf("a numeric string in a room of version 10: %v", err)

		var msg string
		for i := 0; !strings.ContainsAny(msg, "/+"); i++ {
			if i == 100 {
				t.Fatal("no event id with a '/' or a '+' in 100 messages")
			}
			msg = got(hs.say(alice, old, fmt.Sprintf("old message %d", i))).ok(t)
		}
		red := got(c.Redact(ctx, old, msg, "user_room_flood", "old/1+2")).ok(t)
		t.Logf("redacted %s, an event id to escape, with %s", msg, red)
		redacted(t, hs, bot, old, msg, red)
	})

	t.Run("rate limits", func(t *testing.T) {
		// Dendrite limits some endpoints (whoami, join, invite, profile,
		// ...), not /send, /state or /redact: a non-exempt moderator acts
		// at any rate, and only whoami is refused.
		mod := hs.register("moderator")
		m := hs.client(mod)
		modRoom := hs.createRoom(mod, "modded", "")
		hs.join(alice, modRoom)
		var msgs []string
		for i := range 2 * threshold {
			msgs = append(msgs, got(hs.say(alice, modRoom, fmt.Sprintf("flood %d", i))).ok(t))
		}
		start := time.Now()
		for i, ev := range msgs {
			pl := got(m.PowerLevels(ctx, modRoom)).ok(t)
			pl.SetUser(alice.ID, -i)
			got(m.SetPowerLevels(ctx, modRoom, pl)).ok(t)
			got(m.Redact(ctx, modRoom, ev, "flood", fmt.Sprintf("mod-%d", i))).ok(t)
		}
		t.Logf("%d reads, writes of power levels and redactions in %v: none limited", len(msgs), time.Since(start))

		// whoami: the threshold+1st request within the cooloff is a 429.
		var limited error
		for i := 0; i < 4*threshold && limited == nil; i++ {
			_, limited = m.WhoAmI(ctx)
		}
		a := hs.keep(t, "error-429-limit-exceeded")
		d, rateLimited := RetryAfter(limited)
		if !rateLimited || d != cooloff || Temporary(limited) || Forbidden(limited) {
			t.Fatalf("a 429 from Dendrite: %v (retry after %v, %v)", limited, d, rateLimited)
		}
		t.Logf("429 headers: %v (Retry-After %q)", a.header, a.header.Get("Retry-After"))
		// The exempt bot is never limited.
		for range 4 * threshold {
			got(c.WhoAmI(ctx)).ok(t)
		}
	})
}

// forbidden fails the test unless err is an *Error that Forbidden
// reports, and keeps its body as name.
func forbidden(t *testing.T, hs *homeserver, what, name string, err error) {
	t.Helper()
	hs.keep(t, name)
	if !Forbidden(err) || Temporary(err) {
		t.Fatalf("%s: want Forbidden, got %v", what, err)
	}
	t.Logf("%s: %v", what, err)
}

// redacted waits until event reads as redacted by redaction: no content
// left, and unsigned.redacted_because naming it.
func redacted(t *testing.T, hs *homeserver, u dendrite.User, room, event, redaction string) {
	t.Helper()
	wait.For(t, 10*time.Second, func() error {
		var ev struct {
			Content  map[string]any `json:"content"`
			Unsigned struct {
				RedactedBecause struct {
					EventID string `json:"event_id"`
				} `json:"redacted_because"`
			} `json:"unsigned"`
		}
		if err := hs.Call("GET", dendrite.RoomPath(room)+"/event/"+escape(event), u.Token, nil, &ev); err != nil {
			return err
		}
		if len(ev.Content) != 0 || ev.Unsigned.RedactedBecause.EventID != redaction {
			return fmt.Errorf("%s reads %+v: not redacted by %s yet", event, ev, redaction)
		}
		return nil
	})
}
