package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// consumeAnswer is the part of a consuming check's answer the tests read.
type consumeAnswer struct {
	Allowed  bool  `json:"allowed"`
	Consumed *bool `json:"consumed"`
	Complete *bool `json:"complete"`
}

// burst sends n consuming checks of one key at once, spread over the HTTP
// servers of ms (a client of its own each, several connections) and NATS
// requests, and returns the ids of those allowed.
func burst(t *testing.T, ms []*testMain, room, user string, n int) []string {
	t.Helper()
	return burstAs(t, ms, room, user, n, "")
}

// burstAs is burst with ids of its own: tag tells them from another
// burst's of the same key (an id counted before is answered as it was,
// allowed).
func burstAs(t *testing.T, ms []*testMain, room, user string, n int, tag string) []string {
	t.Helper()
	var (
		mu      sync.Mutex
		allowed []string
		failed  atomic.Value
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	fail := func(err error) { failed.CompareAndSwap(nil, err) }
	for i := range n {
		id := fmt.Sprintf("%s-%s-%s%d", room, user, tag, i)
		body := fmt.Sprintf(`{"room":%q,"user":%q,"text":"spam %d","consume":true,"id":%q}`, room, user, i, id)
		tm := ms[i%len(ms)]
		wg.Go(func() {
			<-start
			var data []byte
			if i%3 == 2 { // over NATS, to any member
				msg, err := tm.nc.Request("chatpulse.throttle.check", []byte(body), 10*time.Second)
				if err != nil {
					fail(err)
					return
				}
				data = msg.Data
			} else {
				resp, err := http.Post(tm.url+"/api/v1/throttle/check", "application/json", bytes.NewBufferString(body))
				if err != nil {
					fail(err)
					return
				}
				data, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			var a consumeAnswer
			if err := json.Unmarshal(data, &a); err != nil || a.Consumed == nil {
				fail(fmt.Errorf("answer %s: %v", data, err))
				return
			}
			// A denied check's read-only questions to the stages after the
			// one that denied may time out on a loaded machine: what it
			// decided stands. An allowed one must have asked every stage.
			if a.Allowed && a.Complete != nil && !*a.Complete {
				fail(fmt.Errorf("an incomplete answer allowed, from a complete group: %s", data))
			}
			if a.Allowed != *a.Consumed {
				fail(fmt.Errorf("allowed %v but consumed %v: %s", a.Allowed, *a.Consumed, data))
			}
			if a.Allowed {
				mu.Lock()
				allowed = append(allowed, id)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return allowed
}

// tenMessages says why room's 1m view does not count the 10 allowed
// messages' events yet, if it does not.
func tenMessages(tm *testMain, room string) error {
	var v struct {
		Messages int64 `json:"messages"`
	}
	tm.get("/api/v1/rooms/"+room+"?window=1m", &v)
	if v.Messages != 10 {
		return fmt.Errorf("room %s: the view counts %d of the 10 events", room, v.Messages)
	}
	return nil
}

// floodCounts is what each policy holds for a key, asked read-only.
func floodCounts(tm *testMain, room, user string) map[string]int64 {
	var a checkAnswer
	tm.post("/api/v1/throttle/check", fmt.Sprintf(`{"room":%q,"user":%q}`, room, user), &a)
	c := map[string]int64{}
	for _, d := range a.Decisions {
		c[d.Policy] = d.Count
	}
	return c
}

// consumeBursts is the test of docs/contract.md section 10 on a running
// chatpulse (one, or the members of a group): a burst of consuming checks
// of one key, sent at once over many connections and NATS, is allowed
// exactly the default limit of 10 times, whatever its size; the allowed
// messages' events, published then, leave the policies' counts where the
// checks put them and are counted by the views.
func consumeBursts(t *testing.T, ms []*testMain, publish func(subject, payload string)) {
	for _, n := range []int{20, 40, 100, 400} {
		room, user := fmt.Sprint("burst-", n), fmt.Sprint("bot-", n) // nothing in its windows
		ids := burst(t, ms, room, user, n)
		if len(ids) != 10 {
			t.Fatalf("burst of %d: %d allowed, want the limit, 10", n, len(ids))
		}
		for _, id := range ids {
			publish("chat."+room+"."+user, fmt.Sprintf(`{"id":%q,"room":%q,"user":%q,"text":"spam"}`, id, room, user))
		}
		for _, tm := range ms {
			wait.For(t, 30*time.Second, func() error { return tenMessages(tm, room) })
			if c := floodCounts(tm, room, user); c["user_room_flood"] != 10 || c["user_flood"] != 10 {
				t.Fatalf("burst of %d: after the events, the policies count %v, want 10 each (each message once)", n, c)
			}
		}
	}
}

func TestConsumingBurstStandalone(t *testing.T) {
	tm := startMain(t)
	consumeBursts(t, []*testMain{tm}, tm.publish)
}

func TestConsumingBurstGroup(t *testing.T) {
	url := natstest.Start(t).URL()
	ms := startGroup(t, url, "burst", 3, nil)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	consumeBursts(t, ms, func(subject, payload string) {
		if _, err := nc.Request(subject, []byte(payload), 5*time.Second); err != nil { // acked by the stream
			t.Fatal(err)
		}
	})
}

// Consumed hits survive a restart, with the snapshot of a clean stop and
// with a full replay, and each consumed message whose event came is
// counted once after it, as before it.
func TestConsumedSurviveRestart(t *testing.T) {
	url := natstest.Start(t).URL()
	for _, snapshots := range []string{"30s", "0"} {
		dir, instance := t.TempDir(), "consume-"+snapshots
		args := []string{"--nats-url", url, "--data-dir", dir, "--instance", instance, "--snapshot-interval", snapshots, "--stream", "CHAT_" + map[string]string{"30s": "SNAP", "0": "REPLAY"}[snapshots], "--subject", "chat" + snapshots + ".>"}
		tm := startMain(t, args...)
		subject := "chat" + snapshots + ".lobby.bot"
		ids := burst(t, []*testMain{tm}, "lobby", "bot", 30)
		if len(ids) != 10 {
			t.Fatalf("snapshots %s: %d allowed, want 10", snapshots, len(ids))
		}
		for _, id := range ids {
			if _, err := tm.nc.Request(subject, fmt.Appendf(nil, `{"id":%q,"room":"lobby","user":"bot"}`, id), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		tm.waitReceived(10)
		before := floodCounts(tm, "lobby", "bot")
		tm.Close()
		tm = startMain(t, args...)
		if after := floodCounts(tm, "lobby", "bot"); after["user_room_flood"] != 10 || after["user_flood"] != before["user_flood"] {
			t.Errorf("snapshots %s: after a restart the policies count %v, before %v; want 10 each", snapshots, after, before)
		}
		// Gone before the next round: its check service shares the NATS
		// server, and would answer some of that round's checks.
		tm.Close()
	}
}

// A takeover keeps consumed hits as a restart does (docs/contract.md
// section 10): each member of a group of two is closed in turn, so every
// partition of the flooded keys moves at least once, and each consumed
// message counts once after, whether its event came before the takeover
// (key a) or after it (key b).
func TestConsumedSurviveTakeover(t *testing.T) {
	url := natstest.Start(t).URL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	publish := func(room string, ids []string) {
		for _, id := range ids {
			if _, err := nc.Request("chat."+room+".bot-"+room, fmt.Appendf(nil, `{"id":%q,"room":%q,"user":"bot-%s"}`, id, room, room), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	args := []string{"--snapshot-interval", "200ms"}
	ms := startGroup(t, url, "takeover", 2, nil, args...)
	ids := map[string][]string{}
	for _, room := range []string{"a", "b"} {
		if ids[room] = burst(t, ms, room, "bot-"+room, 30); len(ids[room]) != 10 {
			t.Fatalf("room %s: %d allowed, want 10", room, len(ids[room]))
		}
	}
	publish("a", ids["a"])
	wait.For(t, 30*time.Second, func() error { return tenMessages(ms[0], "a") })

	for i, closed := range []int{0, 1} {
		survivor := ms[1-closed]
		ms[closed].Close()
		waitComplete(t, survivor, 1)
		if i == 0 {
			publish("b", ids["b"]) // after the takeover: its check's hits moved, or the event counts them
		}
		for _, room := range []string{"a", "b"} {
			wait.For(t, 30*time.Second, func() error { return tenMessages(survivor, room) })
			if c := floodCounts(survivor, room, "bot-"+room); c["user_room_flood"] != 10 || c["user_flood"] != 10 {
				t.Fatalf("after member m%d closed, room %s: the policies count %v, want 10 each (each message once)", closed, room, c)
			}
		}
		if i == 0 { // back, so that the other can be closed
			ms[closed] = startMain(t, append([]string{"--nats-url", url, "--group", "takeover", "--instance", fmt.Sprint("m", closed), "--partitions", "8"}, args...)...)
			waitComplete(t, ms[closed], 2)
		}
	}
	if more := burstAs(t, ms[:1], "a", "bot-a", 5, "more-"); len(more) != 0 {
		t.Errorf("after two takeovers, %d more consuming checks of a full key allowed, want none", len(more))
	}
}
