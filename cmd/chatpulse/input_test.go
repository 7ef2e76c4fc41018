package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/rolling"
)

func TestInputFlags(t *testing.T) {
	m := NewMain()
	if err := m.ParseFlags(nil, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.Input.Name() != "chatpulse" || c.Input.MaxPayload() != 64<<10 || c.SourceStream != "" || c.Subject != "chat.>" {
		t.Fatalf("defaults: input %s (%d bytes), source %q, subject %q", c.Input.Name(), c.Input.MaxPayload(), c.SourceStream, c.Subject)
	}
	env := map[string]string{"CHATPULSE_INPUT": "matrix", "CHATPULSE_SOURCE_STREAM": "DendriteOutputRoomEvent", "CHATPULSE_MAX_EVENT_BYTES": "2000000"}
	m = NewMain()
	if err := m.ParseFlags([]string{"--stream", "MATRIX"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.Input.Name() != "matrix" || c.Input.MaxPayload() != 2000000 || c.SourceStream != "DendriteOutputRoomEvent" || c.Subject != ">" {
		t.Fatalf("from the environment: input %s (%d bytes), source %q, subject %q", c.Input.Name(), c.Input.MaxPayload(), c.SourceStream, c.Subject)
	}
	m = NewMain()
	if err := m.ParseFlags([]string{"--input", "matrix", "--source-stream", "D", "--subject", "D.>"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.Subject != "D.>" || c.Input.MaxPayload() != 1<<20 {
		t.Fatalf("a subject given with --source-stream: %q, %d bytes", c.Subject, c.Input.MaxPayload())
	}
	// A group files what it takes of the stream on --subject.
	m = NewMain()
	if err := m.ParseFlags([]string{"--input", "matrix", "--source-stream", "D", "--group", "g"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if c := m.Config; c.Subject != "chat.>" {
		t.Fatalf("a group with --source-stream: subject %q, want chat.>", c.Subject)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("room: /r\nuser: /u\nts: {pointer: /t, unit: hours}\n"), 0o644)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"unknown input":    {[]string{"--input", "irc"}, `--input: "irc": want chatpulse, matrix or mapping:FILE`},
		"missing mapping":  {[]string{"--input", "mapping:/nonexistent.yaml"}, "--input: mapping: open /nonexistent.yaml"},
		"bad mapping":      {[]string{"--input", "mapping:" + bad}, "--input: " + bad + `:3: ts.unit: "hours" is not a unit (valid: ms, s, rfc3339)`},
		"own events limit": {[]string{"--max-event-bytes", "100000"}, "--max-event-bytes: chatpulse's own events are at most 65536 bytes"},
		"limit range":      {[]string{"--input", "matrix", "--max-event-bytes", "-1"}, "--max-event-bytes: -1 is out of range"},
		"core NATS":        {[]string{"--source-stream", "D", "--jetstream=false"}, "--source-stream D: sourcing needs JetStream"},
		"itself":           {[]string{"--source-stream", "CHAT"}, "--source-stream CHAT: the stream chatpulse reads (--stream) cannot source itself"},
		"group copy":       {[]string{"--source-stream", "CHAT_SOURCE", "--group", "g"}, "--source-stream CHAT_SOURCE: in a group, that is the stream that sources it"},
		"group input":      {[]string{"--input", "matrix", "--group", "g"}, "--input matrix with --group: a group reads a chat system's events from its stream; name it with --source-stream"},
	} {
		err := NewMain().ParseFlags(tc.args, func(string) string { return "" })
		var usage *UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a usage error containing %q", name, err, tc.want)
		}
	}
	// A mapping file is checked before anything starts: one line, status 2.
	exitsWithUsage(t, buildBinary(t), "bad mapping", []string{"--input", "mapping:" + bad}, bad+":3: ts.unit")
}

// zulipMapping is docs/input.md's mapping of Zulip messages.
const zulipMapping = `room: /message/display_recipient
user: /message/sender_email
ts: {pointer: /message/timestamp, unit: s}
id: /message/id
text: /message/content
type: /message/type
message: [stream]
`

func zulipEvent(id int, e chat.Event) string {
	return fmt.Sprintf(`{"type":"message","id":%d,"flags":[],"message":{"client":"website","content":%q,"display_recipient":%q,"id":%d,`+
		`"sender_email":%q,"sender_full_name":"x","sender_id":11,"stream_id":7,"subject":"t","timestamp":%d.%03d,"type":"stream"}}`,
		id, "hello "+e.Room, e.Room, 1000+id, e.User, e.TS/1000, e.TS%1000)
}

// With --input mapping:FILE chatpulse reads any JSON: every view equals
// the oracle's, events of other types are ignored, and events that do not
// map are dead-lettered unmapped with the pointer that failed.
func TestMappingInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "zulip.yaml")
	if err := os.WriteFile(file, []byte(zulipMapping), 0o644); err != nil {
		t.Fatal(err)
	}
	clock := newFrozen()
	tm := startMainAt(t, clock.Now, "--input", "mapping:"+file, "--subject", "zulip.>")
	if got := tm.metric(`chatpulse_events_rejected_total{reason="unmapped"}`); got != 0 {
		t.Fatalf("unmapped is not exported at 0: %v", got)
	}
	dead := make(chan *nats.Msg, 10)
	sub, err := tm.nc.ChanSubscribe("chatpulse.deadletter.unmapped", dead)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	tm.nc.Flush()
	now := clock.ms.Load()
	evs := randomTrace(rand.New(rand.NewPCG(5, 6)), now, 300)
	for i := range evs {
		tm.publish("zulip.events", zulipEvent(i, evs[i]))
	}
	tm.publish("zulip.events", `{"type":"message","message":{"type":"private","display_recipient":[{"id":1}],"timestamp":1}}`)
	tm.publish("zulip.events", `{"type":"presence","email":"a@b","presence":{}}`)
	tm.publish("zulip.events", `{"type":"message","message":{"type":"stream","sender_email":"a@b","timestamp":1}}`)
	tm.waitReceived(len(evs) + 3)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	late := o.Observe(now, evs)
	tm.compareAll(o, now, evs)
	if got, want := tm.metric("chatpulse_events_ignored_total"), 2.0; got != want {
		t.Errorf("ignored = %v, want %v (a direct message, a presence event)", got, want)
	}
	if got := tm.metric(`chatpulse_events_rejected_total{reason="late"}`); got != float64(len(late)) {
		t.Errorf("late = %v, want %d", got, len(late))
	}
	select {
	case m := <-dead:
		if got := m.Header.Get("Chatpulse-Error"); got != "room: no value at /message/display_recipient" {
			t.Errorf("Chatpulse-Error %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no unmapped dead letter")
	}
}

// foreignEvent is a Matrix envelope as Dendrite publishes it.
func foreignEvent(kind, room, user string, ts int64, n int) string {
	content := fmt.Sprintf(`{"body":"message %d","msgtype":"m.text"}`, n)
	evType, stateKey := "m.room.message", ""
	if kind != "message" {
		evType, stateKey = "m.room.member", fmt.Sprintf(`"state_key":%q,`, user)
		content = fmt.Sprintf(`{"membership":%q,"displayname":"x"}`, kind)
	}
	return fmt.Sprintf(`{"type":"new_room_event","new_room_event":{"event":{"auth_events":["$a"],"content":%s,"depth":%d,`+
		`"hashes":{"sha256":"h"},"origin":"localhost","origin_server_ts":%d,"prev_events":["$p"],"room_id":%q,"sender":%q,%s`+
		`"signatures":{"localhost":{"ed25519:a":"sig"}},"type":%q,"_room_version":"10","_event_id":"$e%d"},"latest_event_ids":["$e%d"],`+
		`"send_as_server":"localhost","history_visibility":"shared"}}`, content, n, ts, room, user, stateKey, evType, n, n)
}

// chatSystem starts a NATS server with a chat system's stream on it, as
// Dendrite makes its own: Foreign (subjects Foreign and Foreign.>), with
// interest retention, and the system's own consumer, which acks
// everything at once. It returns the server's URL and a client.
func chatSystem(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	url := natstest.Start(t).URL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	foreign, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Foreign", Subjects: []string{"Foreign", "Foreign.>"}, Retention: jetstream.InterestPolicy})
	if err != nil {
		t.Fatal(err)
	}
	app, err := foreign.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "app", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	acks, err := app.Consume(func(m jetstream.Msg) { m.Ack() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acks.Stop)
	return url, js
}

// waitSources waits until n streams source Foreign: the server sets each
// source up, and until it has, nothing is kept for that stream.
func waitSources(t *testing.T, js jetstream.JetStream, n int) jetstream.Stream {
	t.Helper()
	var foreign jetstream.Stream
	wait.For(t, 10*time.Second, func() error {
		var err error
		if foreign, err = js.Stream(context.Background(), "Foreign"); err != nil {
			return err
		}
		if got := foreign.CachedInfo().State.Consumers; got != n+1 {
			return fmt.Errorf("the foreign stream has %d consumers, want the app's and %d sources'", got, n)
		}
		return nil
	})
	return foreign
}

// A foreign stream with interest retention, read through
// --source-stream: chatpulse's stream sources it, so what arrives while
// chatpulse is down is counted once it is back, replay after a restart
// gives the same views, and the foreign stream is never written to, keeps
// nothing for chatpulse once it is copied, and is left with no consumer
// of chatpulse's once chatpulse's stream is deleted.
// (TestDendrite does this with a real homeserver, where it is installed.)
func TestSourceStream(t *testing.T) {
	url, js := chatSystem(t)
	ctx := context.Background()
	clock := newFrozen()
	args := []string{"--nats-url", url, "--input", "matrix", "--source-stream", "Foreign", "--stream", "CHAT_MATRIX"}
	tm := startMainAt(t, clock.Now, args...)
	foreign := waitSources(t, js, 1)

	now := clock.ms.Load()
	r := rand.New(rand.NewPCG(7, 8))
	rooms := []string{"!3rYnfsG2FsJdpctO:localhost", "!side.room:matrix.example.org", "!a%b:localhost"}
	users := []string{"@alice:localhost", "@bob.smith:matrix.example.org", "@carol:localhost", "@dave_99:localhost"}
	var evs []chat.Event
	published := 0
	publish := func(n int) {
		for range n {
			e := chat.Event{Room: rooms[r.IntN(len(rooms))], User: users[r.IntN(len(users))], TS: now - r.Int64N(50_000)}
			kind := []string{"message", "message", "message", "join", "leave"}[r.IntN(5)]
			msg := nats.NewMsg("Foreign")
			msg.Data = []byte(foreignEvent(kind, e.Room, e.User, e.TS, published))
			msg.Header.Set("output_room_event_type", "new_room_event")
			msg.Header.Set("room_id", e.Room)
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
			published++
			e.Kind = map[string]chat.Kind{"message": chat.KindMessage, "join": chat.KindJoin, "leave": chat.KindLeave}[kind]
			evs = append(evs, e) // joins and leaves counted too (docs/contract.md section 12)
		}
	}
	publish(200)
	bad := nats.NewMsg("Foreign")
	bad.Data = []byte(strings.Replace(foreignEvent("message", rooms[0], users[0], now, 999), `"room_id"`, `"room"`, 1))
	if _, err := js.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	published++
	tm.waitReceived(published)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(now, evs)
	tm.compareAll(o, now, evs)
	if got := tm.metric(`chatpulse_events_rejected_total{reason="unmapped"}`); got != 1 {
		t.Errorf("unmapped = %v, want 1", got)
	}
	if got := tm.metric("chatpulse_events_ignored_total"); got != 0 {
		t.Errorf("ignored = %v, want none: joins and leaves are counted", got)
	}

	// chatpulse stops; the chat system goes on, and the server goes on
	// sourcing its events.
	tm.Close()
	publish(50)
	wait.For(t, 10*time.Second, func() error {
		s, err := js.Stream(ctx, "CHAT_MATRIX")
		if err != nil {
			return err
		}
		if n := s.CachedInfo().State.Msgs; n != uint64(published) {
			return fmt.Errorf("the sourcing stream holds %d of %d", n, published)
		}
		return nil
	})
	tm = startMainAt(t, clock.Now, args...)
	tm.waitReceived(published - 201) // after the snapshot Close saved
	o = oracle.New(ws)
	o.Observe(now, evs)
	tm.compareAll(o, now, evs)

	// The foreign stream was never written to, and keeps nothing once
	// its own consumer has acked.
	wait.For(t, 10*time.Second, func() error {
		var err error
		if foreign, err = js.Stream(ctx, "Foreign"); err != nil {
			return err
		}
		if st := foreign.CachedInfo().State; st.LastSeq != uint64(published) || st.Msgs != 0 {
			return fmt.Errorf("foreign stream: last sequence %d (want %d), %d messages kept (want 0)", st.LastSeq, published, st.Msgs)
		}
		return nil
	})
	// Its consumers are the app's and the one the server keeps for the
	// sourcing stream (a durable one on a single server: see
	// bus/sourced.go), none of chatpulse's; and the server removes that
	// one with the sourcing stream.
	for info := range foreign.ListConsumers(ctx).Info() {
		if info.Name != "app" && info.Config.Metadata["_nats.src.stream"] != "CHAT_MATRIX" {
			t.Errorf("consumer %s on the foreign stream: %+v", info.Name, info.Config)
		}
	}
	tm.Close()
	if err := js.DeleteStream(ctx, "CHAT_MATRIX"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		var names []string
		for name := range foreign.ListConsumers(ctx).Info() {
			names = append(names, name.Name)
		}
		if len(names) != 1 {
			return fmt.Errorf("the foreign stream's consumers after the sourcing stream is gone: %v, want [app]", names)
		}
		return nil
	})
}

// A --stream that holds chatpulse's own events is not made to source
// another: chatpulse refuses to start, with status 2, and says which.
func TestSourceStreamRefusesOwnStream(t *testing.T) {
	url := natstest.Start(t).URL()
	startMain(t, "--nats-url", url) // makes CHAT, capturing chat.>
	m := NewMain()
	m.ParseFlags([]string{"--nats-url", url, "--http", "127.0.0.1:0", "--input", "matrix", "--source-stream", "DendriteOutputRoomEvent"}, func(string) string { return "" })
	err := m.Run(t.Context())
	m.Close()
	var usage *UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "stream CHAT exists and does not source DendriteOutputRoomEvent") {
		t.Fatalf("Run: %v, want a usage error saying CHAT does not source DendriteOutputRoomEvent", err)
	}
}
