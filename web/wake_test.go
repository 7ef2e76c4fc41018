package web

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
)

// wakeClient is a client of h whose writer the test plays: parked, as a
// writer waiting for work is, unless busy (a writer still writing).
func wakeClient(h *hub, busy bool) *client {
	c := &client{hub: h, wake: make(chan struct{}, 1)}
	h.clients[c] = struct{}{}
	if !busy {
		c.parked()
	}
	return c
}

// woken are the clients of cs with a wake-up pending, which each takes.
func woken(cs []*client) map[*client]bool {
	out := map[*client]bool{}
	for _, c := range cs {
		select {
		case <-c.wake:
			out[c] = true
		default:
		}
	}
	return out
}

// A push with more clients than wakeBatch wakes wakeBatch of them, and one
// more each time a woken writer runs, so that whatever else the process
// has to run waits behind a batch of writers, never behind all of them.
// A writer still writing (a slow client) is woken without taking a place,
// a client that left is not woken, every other client is woken exactly
// once however many pushes touched it, and a fresh client's subscription
// is answered at once while the push's clients wait.
func TestWakeBatch(t *testing.T) {
	h := newHub(hubConfig{})
	busy := wakeClient(h, true)
	gone := wakeClient(h, false)
	delete(h.clients, gone)
	cs := []*client{busy, gone}
	for range 3 * wakeBatch {
		cs = append(cs, wakeClient(h, false))
	}
	for range 2 { // two pushes before any writer runs
		for _, c := range cs {
			h.touch(c)
		}
		h.pushed()
	}
	h.wakeSome()

	first := woken(cs)
	if !first[busy] || first[gone] || len(first) != wakeBatch+1 || h.wakes.out != wakeBatch {
		t.Fatalf("after a push: %d clients woken (busy %v, gone %v), %d places out; want %d and the busy one, not the gone one, %d places",
			len(first), first[busy], first[gone], h.wakes.out, wakeBatch+1, wakeBatch)
	}

	// While every place is out, a fresh client's subscription is served.
	k := viewKey{kind: viewOverview, window: "1m"}
	h.views[k] = &watched{key: k, watchers: map[*client]struct{}{}, last: rendering{frame: []byte(`{}`)}}
	fresh := wakeClient(h, false)
	h.serve(request{op: subscribe, c: fresh, key: k})
	if !woken([]*client{fresh})[fresh] {
		t.Fatal("a fresh client's subscription waits for the push's writers")
	}
	fresh.running()

	all := first
	for len(all) < len(cs)-1 {
		var ran *client
		for c := range all {
			if c.writer.Load() == writerWoken {
				ran = c
				break
			}
		}
		if ran == nil {
			t.Fatalf("%d of %d clients woken, and no woken writer holds a place", len(all), len(cs)-1)
		}
		ran.running() // its writer runs: the place goes back
		<-h.ran
		h.wakes.out--
		h.wakeSome()
		next := woken(cs)
		if len(next) != 1 {
			t.Fatalf("a writer ran and %d more clients were woken, want 1", len(next))
		}
		for c := range next {
			if all[c] {
				t.Fatal("a client woken twice for the same pushes")
			}
			all[c] = true
		}
		if h.wakes.out > wakeBatch {
			t.Fatalf("%d places out", h.wakes.out)
		}
	}
	if all[gone] || len(h.wakes.clients) != 0 {
		t.Fatalf("woken: the gone client %v; %d clients still queued", all[gone], len(h.wakes.clients))
	}
}

// Through real connections: with several times wakeBatch clients, each
// gets the view of what came, however the batches go.
func TestHubWakesEveryClient(t *testing.T) {
	agg := newAggregator(t)
	url := testHub(t, agg)
	const n = 4 * wakeBatch
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		c, frames := testClient(t, url)
		sendFrame(t, c, `{"type":"subscribe","view":"overview"}`)
		ready.Add(1)
		done.Go(func() {
			waitFrame(t, frames, fmt.Sprint("client ", i, "'s first view"), func(f testFrame) bool { return f.View == "overview" })
			ready.Done()
			<-start
			waitFrame(t, frames, fmt.Sprint("client ", i, "'s view of 3 messages"), func(f testFrame) bool {
				var v aggregator.Overview
				json.Unmarshal(f.Data, &v)
				return f.View == "overview" && v.Messages == 3
			})
		})
	}
	ready.Wait()
	close(start)
	now := testNow.UnixMilli()
	for i := range 3 {
		agg.Observe(now, []chat.Event{{Room: "lobby", User: fmt.Sprint("u", i), TS: now}}, nil)
	}
	done.Wait()
}
