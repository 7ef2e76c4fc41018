package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// Synapse cannot be installed here, so these tests are Synapse's side
// of the exchange, written from the module synapse-http-antispam v0.5
// (synapse_http_antispam.py) and the Synapse code it calls:
//
//   - _do_request POSTs to f"{base_url}/{callback}" with
//     SimpleHttpClient.post_json_get_json: the body is
//     encode_canonical_json of the callback's parameters (keys sorted,
//     no spaces, UTF-8 as it is), with Content-Type and Accept
//     application/json, Synapse's User-Agent, and the module's headers:
//     Authorization: Bearer <authorization> when configured;
//   - check_event_for_spam sends {"event": format_event_for_client_v2(
//     event.get_dict())} with event_id set: the event without
//     auth_events, prev_events, hashes, signatures, depth, origin and
//     prev_state; user_may_join_room sends {"user", "room", "is_invited"};
//     _do_ping sends {"id"} to <base_url>/ping;
//   - any 2xx is NOT_SPAM (its body must be JSON); any other status is a
//     refusal with the body's errcode (M_FORBIDDEN without one), and the
//     rest of the body goes to the client.

// synapseModule is synapse-http-antispam configured with base_url and
// authorization.
type synapseModule struct {
	t       *testing.T
	baseURL string
	token   string // authorization; "": none
}

// moduleAnswer is what the module makes of an answer.
type moduleAnswer struct {
	status  int
	notSpam bool
	errcode string
	fields  map[string]any // the rest of the body: what the client sees
}

func newModule(t *testing.T, tm *testMain) synapseModule {
	return synapseModule{t: t, baseURL: tm.url + "/api/v1/matrix/antispam", token: tm.token}
}

// canonicalJSON is Synapse's encode_canonical_json for the values these
// tests send: sorted keys, no spaces, no HTML escapes.
func canonicalJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// call is _do_request(callback, params), with the call itself (its error
// is the module's "failed to connect", which fails open for
// check_event_for_spam only).
func (m synapseModule) call(callback string, params map[string]any) (moduleAnswer, error) {
	req, err := http.NewRequest(http.MethodPost, m.baseURL+"/"+callback, bytes.NewReader(canonicalJSON(params)))
	if err != nil {
		return moduleAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "Synapse/1.136.0")
	if m.token != "" {
		req.Header.Set("Authorization", "Bearer "+m.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return moduleAnswer{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := moduleAnswer{status: resp.StatusCode}
	if err := json.Unmarshal(body, &a.fields); err != nil {
		return a, fmt.Errorf("%s: %d: not JSON: %q", callback, resp.StatusCode, body)
	}
	if a.notSpam = resp.StatusCode >= 200 && resp.StatusCode < 300; !a.notSpam {
		a.errcode = "M_FORBIDDEN"
		if code, ok := a.fields["errcode"].(string); ok {
			a.errcode = code
		}
		delete(a.fields, "errcode")
	}
	return a, nil
}

func (m synapseModule) mustCall(callback string, params map[string]any) moduleAnswer {
	m.t.Helper()
	a, err := m.call(callback, params)
	if err != nil {
		m.t.Fatal(err)
	}
	return a
}

// matrixEvent is an event as Synapse's EventBase.get_dict() gives it, in
// a room of version 10, and its event id.
type matrixEvent struct {
	id   string
	dict map[string]any
}

// newEvent is an event of type typ in room from sender at ts (Unix ms),
// with content; stateKey, if not "", makes it a state event. Its id is
// "$" and 43 characters of unpadded base64url, as a reference hash is.
func newEvent(typ, room, sender, stateKey string, ts int64, content map[string]any) matrixEvent {
	d := map[string]any{
		"auth_events": []string{"$create", "$power", "$member"}, "prev_events": []string{"$prev"},
		"type": typ, "room_id": room, "sender": sender, "content": content, "depth": 12,
		"hashes": map[string]string{"sha256": "x"}, "signatures": map[string]any{"hs": map[string]string{"ed25519:a": "sig"}},
		"origin_server_ts": ts, "unsigned": map[string]any{"age_ts": ts},
	}
	if stateKey != "" {
		d["state_key"] = stateKey
	}
	sum := sha256.Sum256(canonicalJSON(d))
	return matrixEvent{id: "$" + base64.RawURLEncoding.EncodeToString(sum[:]), dict: d}
}

// message is an m.room.message of text.
func message(room, sender, text string, ts int64) matrixEvent {
	return newEvent("m.room.message", room, sender, "", ts, map[string]any{"msgtype": "m.text", "body": text})
}

// checkEvent is check_event_for_spam(event).
func (m synapseModule) checkEvent(ev matrixEvent) (moduleAnswer, error) {
	d := map[string]any{}
	for k, v := range ev.dict {
		d[k] = v
	}
	for _, k := range []string{"auth_events", "prev_events", "hashes", "signatures", "depth", "origin", "prev_state"} { // format_event_for_client_v2
		delete(d, k)
	}
	d["event_id"] = ev.id
	return m.call("check_event_for_spam", map[string]any{"event": d})
}

func (m synapseModule) mustCheckEvent(ev matrixEvent) moduleAnswer {
	m.t.Helper()
	a, err := m.checkEvent(ev)
	if err != nil {
		m.t.Fatal(err)
	}
	return a
}

// mayJoin is user_may_join_room(user, room, is_invited).
func (m synapseModule) mayJoin(user, room string, invited bool) (moduleAnswer, error) {
	return m.call("user_may_join_room", map[string]any{"user": user, "room": room, "is_invited": invited})
}

func (m synapseModule) mustMayJoin(user, room string, invited bool) moduleAnswer {
	m.t.Helper()
	a, err := m.mayJoin(user, room, invited)
	if err != nil {
		m.t.Fatal(err)
	}
	return a
}

// synapseBurst sends n check_event_for_spam of one sender's messages in
// one room at once, spread over the members' module clients, and returns
// how many were not spam; every other must be M_LIMIT_EXCEEDED.
func synapseBurst(t *testing.T, mods []synapseModule, room, sender string, ts int64, n int) int {
	t.Helper()
	var (
		mu       sync.Mutex
		allowed  int
		firstErr error
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	for i := range n {
		ev := message(room, sender, fmt.Sprint("spam ", i), ts)
		mod := mods[i%len(mods)]
		wg.Go(func() {
			<-start
			a, err := mod.checkEvent(ev)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				firstErr = err
			case a.notSpam:
				allowed++
			case a.errcode != "M_LIMIT_EXCEEDED" || a.status != http.StatusTooManyRequests:
				firstErr = fmt.Errorf("a denied message: %d %s %v", a.status, a.errcode, a.fields)
			}
		})
	}
	close(start)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return allowed
}

// roomCounts is a room's 1h view: its messages and joins.
func roomCounts(tm *testMain, room string) (messages, joins int64) {
	var v struct{ Messages, Joins int64 }
	tm.get("/api/v1/rooms/"+url.PathEscape(room)+"?window=1h", &v)
	return v.Messages, v.Joins
}

// dendriteEnvelope is ev as Dendrite publishes it: how the same event
// arrives on a Matrix bus (--input matrix).
func dendriteEnvelope(ev matrixEvent) []byte {
	d := map[string]any{"_event_id": ev.id, "_room_version": "10"}
	for k, v := range ev.dict {
		d[k] = v
	}
	return canonicalJSON(map[string]any{"type": "new_room_event", "new_room_event": map[string]any{"event": d}})
}

// TestSynapseStandalone is docs/contract.md section 14's "Asked by
// Synapse" on a chatpulse that reads a Matrix bus (--input matrix), with a
// token, asked exactly as synapse-http-antispam asks:
//
//   - ping answers; a missing or wrong token is a refusal;
//   - an allowed message is filed and counted once by the views, whether
//     the same event arrives on the bus after its check or before it;
//   - a burst of checks of one sender at once is held to the limit
//     exactly: the others get 429 M_LIMIT_EXCEEDED naming the policy,
//     and none of them is counted;
//   - an edit is allowed and ignored;
//   - a join wave that locks: the join that would cross is refused (403
//     M_FORBIDDEN), and so is every later one until lock_for after the
//     crossing, to the millisecond; an invited user joins meanwhile;
//     every allowed join is counted as a join.
func TestSynapseStandalone(t *testing.T) {
	// The clock starts a quarter of an hour back, so that the lock can
	// run its course without an event ahead of the stream's own time.
	clock := &frozen{}
	clock.ms.Store(time.Now().Add(-15 * time.Minute).UnixMilli())
	tm := startMainAt(t, clock.Now, "--input", "matrix", "--auth-token", "s3cret-token", "--policies", policiesFile(t, `policies:
  - {name: flood, scope: user_in_room, algorithm: sliding_window, limit: 10, window: 1m}
  - {name: raid, scope: room, algorithm: join_wave, limit: 5, window: 1m, act: [lock], lock_for: 10m}
`))
	mod := newModule(t, tm)
	js, err := jetstream.New(tm.nc)
	if err != nil {
		t.Fatal(err)
	}
	onBus := func(ev matrixEvent) *jetstream.PubAck {
		t.Helper()
		msg := &nats.Msg{Subject: "chat." + chat.Token(ev.dict["room_id"].(string)) + "." + chat.Token(ev.dict["sender"].(string)), Data: dendriteEnvelope(ev),
			Header: nats.Header{nats.MsgIdHdr: {ev.id}, "output_room_event_type": {"new_room_event"}}}
		ack, err := js.PublishMsg(context.Background(), msg)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	published := 0 // what the stream holds: what chatpulse receives
	settled := func() {
		t.Helper()
		tm.waitReceived(published)
		if got := tm.metric("chatpulse_events_received_total"); got != float64(published) {
			t.Fatalf("%v events received, want %d", got, published)
		}
	}

	if a := mod.mustCall("ping", map[string]any{"id": "AbCdEfGh"}); !a.notSpam || a.fields["id"] != "AbCdEfGh" || a.fields["status"] != "ok" {
		t.Errorf("ping: %+v", a)
	}
	now := clock.ms.Load()
	for _, token := range []string{"", "wrong"} {
		m := mod
		m.token = token
		if a, err := m.checkEvent(message("!lobby:hs", "@alice:hs", "hi", now)); err != nil || a.notSpam || a.status != http.StatusUnauthorized {
			t.Errorf("token %q: %+v %v, want a refusal (401)", token, a, err)
		}
	}

	// The bus after the check, and before it.
	first, second := message("!lobby:hs", "@alice:hs", "hello", now), message("!lobby:hs", "@alice:hs", "again", now+1)
	if a := mod.mustCheckEvent(first); !a.notSpam || len(a.fields) != 0 {
		t.Fatalf("a first message: %+v, want 200 {}", a)
	}
	published++
	if ack := onBus(first); !ack.Duplicate {
		t.Errorf("the event after its check: stored again, want a duplicate of the filed one")
	}
	onBus(second)
	published++
	if a := mod.mustCheckEvent(second); !a.notSpam {
		t.Fatalf("a message whose event came first: %+v, want allowed", a)
	}
	if a := mod.mustCheckEvent(newEvent("m.room.message", "!lobby:hs", "@alice:hs", "", now, map[string]any{"body": "* again",
		"m.relates_to": map[string]any{"rel_type": "m.replace", "event_id": second.id}})); !a.notSpam {
		t.Errorf("an edit: %+v, want allowed", a)
	}
	settled()
	if msgs, _ := roomCounts(tm, "!lobby:hs"); msgs != 2 {
		t.Errorf("!lobby:hs counts %d messages, want 2: each allowed message once", msgs)
	}

	// A burst, held to the limit; the denied not counted.
	for _, n := range []int{15, 60} {
		room := fmt.Sprintf("!burst%d:hs", n)
		if got := synapseBurst(t, []synapseModule{mod}, room, "@bot:hs", now, n); got != 10 {
			t.Fatalf("a burst of %d: %d allowed, want the limit, 10", n, got)
		}
		published += 10
	}
	a := mod.mustCheckEvent(message("!burst15:hs", "@bot:hs", "one more", now+2))
	if retry, _ := a.fields["retry_after_ms"].(float64); a.status != http.StatusTooManyRequests || a.errcode != "M_LIMIT_EXCEEDED" || retry <= 0 || retry > 60_000 ||
		!bytes.Contains([]byte(fmt.Sprint(a.fields["error"])), []byte("flood (10 of 10)")) {
		t.Errorf("a message over the limit: %+v, want 429 M_LIMIT_EXCEEDED naming flood, with a wait", a)
	}
	settled()
	for _, room := range []string{"!burst15:hs", "!burst60:hs"} {
		if msgs, _ := roomCounts(tm, room); msgs != 10 {
			t.Errorf("%s counts %d messages, want the 10 allowed", room, msgs)
		}
	}

	// A join wave that locks.
	for i := range 5 {
		if a := mod.mustMayJoin(fmt.Sprintf("@joiner%d:hs", i), "!raid:hs", false); !a.notSpam {
			t.Fatalf("join %d: %+v, want allowed", i, a)
		}
		published++
	}
	crossing := clock.ms.Load()
	a = mod.mustMayJoin("@raider:hs", "!raid:hs", false)
	if a.status != http.StatusForbidden || a.errcode != "M_FORBIDDEN" || !bytes.Contains([]byte(fmt.Sprint(a.fields["error"])), []byte("raid")) {
		t.Fatalf("the join that would cross: %+v, want 403 M_FORBIDDEN naming raid", a)
	}
	if a := mod.mustMayJoin("@friend:hs", "!raid:hs", true); !a.notSpam {
		t.Errorf("an invited join while locked: %+v, want allowed", a)
	}
	published++
	remote := newEvent("m.room.member", "!raid:hs", "@far:remote", "@far:remote", crossing, map[string]any{"membership": "join"})
	if a := mod.mustCheckEvent(remote); a.status != http.StatusForbidden || a.errcode != "M_FORBIDDEN" {
		t.Errorf("another server's join while locked: %+v, want 403 M_FORBIDDEN", a)
	}
	lockEnd := crossing + (10 * time.Minute).Milliseconds()
	for _, at := range []int64{crossing + time.Minute.Milliseconds(), crossing + (5 * time.Minute).Milliseconds(), lockEnd - 1} {
		clock.ms.Store(at)
		if a := mod.mustMayJoin("@raider:hs", "!raid:hs", false); a.notSpam || a.errcode != "M_FORBIDDEN" {
			t.Errorf("a join %v after the crossing: %+v, want refused", time.Duration(at-crossing)*time.Millisecond, a)
		}
	}
	clock.ms.Store(lockEnd)
	if a := mod.mustMayJoin("@raider:hs", "!raid:hs", false); !a.notSpam {
		t.Errorf("a join lock_for after the crossing: %+v, want allowed", a)
	}
	published++
	settled()
	if _, joins := roomCounts(tm, "!raid:hs"); joins != 7 {
		t.Errorf("!raid:hs counts %d joins, want the 5 before the lock, the invited one and the one after", joins)
	}
}

// TestSynapseGroup: two members of a group, each asked by a Synapse of
// its own at once, hold a burst of one sender's messages, and a wave of
// joins, to the policies' limits exactly, and both count what was
// allowed, once.
func TestSynapseGroup(t *testing.T) {
	url := natstest.Start(t).URL()
	ms := startGroup(t, url, "synapse", 2, nil, "--auth-token", "s3cret-token", "--policies", policiesFile(t, `policies:
  - {name: flood, scope: user_in_room, algorithm: sliding_window, limit: 10, window: 1m}
  - {name: raid, scope: room, algorithm: join_wave, limit: 20, window: 1m, act: [lock]}
`))
	mods := []synapseModule{newModule(t, ms[0]), newModule(t, ms[1])}
	if got := synapseBurst(t, mods, "!burst:hs", "@bot:hs", time.Now().UnixMilli(), 60); got != 10 {
		t.Fatalf("a burst of 60 over two members: %d allowed, want the limit, 10", got)
	}

	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		joined int
		errs   []error
		start  = make(chan struct{})
	)
	for i := range 50 {
		mod := mods[i%2]
		wg.Go(func() {
			<-start
			a, err := mod.mayJoin(fmt.Sprintf("@raider%d:hs", i), "!raid:hs", false)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case a.notSpam:
				joined++
			case a.errcode != "M_FORBIDDEN":
				errs = append(errs, fmt.Errorf("a refused join: %+v", a))
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 || joined != 20 {
		t.Fatalf("a wave of 50 joins over two members: %d allowed, errors %v; want the limit, 20", joined, errs)
	}
	for _, tm := range ms {
		wait.For(t, 30*time.Second, func() error {
			if msgs, _ := roomCounts(tm, "!burst:hs"); msgs != 10 {
				return fmt.Errorf("%s: !burst:hs counts %d messages, want 10", tm.url, msgs)
			}
			if _, joins := roomCounts(tm, "!raid:hs"); joins != 20 {
				return fmt.Errorf("%s: !raid:hs counts %d joins, want 20", tm.url, joins)
			}
			return nil
		})
	}
}
