package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatpulse/chatpulse/throttle"
)

// Hub limits, for all clients together.
const (
	// maxRoomViews bounds the distinct room views watched at once: each
	// costs a render per push, whoever asked for it. The overview and rooms
	// views are not counted (there are two per window), so a fresh
	// dashboard always gets them.
	maxRoomViews = 10_000
	renderers    = 4  // goroutines computing views for the hub
	passBatch    = 64 // views per render job of a push
)

// hub pushes views to websocket clients. One goroutine (run) owns the set
// of clients, what each watches, the views watched and the last version of
// each pushed; readers send it their requests. It computes nothing itself:
// renderer goroutines compute views for it (render.go), so a slow view
// (group mode asks other instances) never holds up a join, a leave or a
// subscribe. Every push interval it hands every watched view to the
// renderers, and gives each that changed, the same bytes, to every
// watcher. A view is in one render job at a time and the hub applies its
// versions in the order they were computed, so a client never gets an
// older version of a view after a newer one.
//
// A client keeps only the newest pending version of each view (latest
// wins), so a slow reader skips versions and holds nothing up: not the hub,
// not ingest, not other clients. What a client costs the hub is what it
// watches: a leave walks the client's own subscriptions, and a push walks
// the views, of which there are at most maxRoomViews plus two per window
// and the feeds.
//
// The feeds, alerts and acts, are coalesced into the push (feed.go): one
// frame per push and feed to the clients that subscribed to it.
//
// A push wakes its clients' writers a batch at a time (wake.go), so that
// the rest of the process never waits for every client's write.
type hub struct {
	hubConfig
	upgrader websocket.Upgrader
	alerts   *feed[throttle.Alert]
	acts     *feed[json.RawMessage]
	requests chan request
	ran      chan struct{} // a woken writer runs (wake.go)
	jobs     chan *renderJob
	results  chan *renderJob
	stopped  chan struct{} // closed when run returns
	count    atomic.Int64  // clients, for the metric
	nviews   atomic.Int64  // distinct views watched, for the metric

	// Owned by run.
	clients   map[*client]struct{}
	views     map[viewKey]*watched
	roomViews int // of views, those of a room
	renders   renderQueue
	wakes     wakeQueue
}

// hubConfig is what a hub needs from the server it serves.
type hubConfig struct {
	render       renderFunc
	windows      func() []string // the configured windows, the default first
	maxName      int             // the longest room name a subscription may name
	pushInterval time.Duration
	checkOrigin  func(*http.Request) bool // may this request open a websocket?
}

// watched is a view that someone watches.
type watched struct {
	key      viewKey
	watchers map[*client]struct{}
	last     rendering // the version pushed last; no frame before the first
	busy     bool      // a render job holds it
}

func newHub(cfg hubConfig) *hub {
	h := &hub{
		hubConfig: cfg,
		alerts:    newFeed[throttle.Alert](feedAlerts),
		acts:      newFeed[json.RawMessage](feedActs),
		requests:  make(chan request, 1024),
		ran:       make(chan struct{}, wakeBatch),
		jobs:      make(chan *renderJob),
		results:   make(chan *renderJob, renderers),
		stopped:   make(chan struct{}),
		clients:   map[*client]struct{}{},
		views:     map[viewKey]*watched{},
	}
	// Write buffers come from a pool and go back after each message, so an
	// idle client holds none.
	h.upgrader = websocket.Upgrader{CheckOrigin: cfg.checkOrigin, ReadBufferSize: 512, WriteBufferSize: 4096, WriteBufferPool: &sync.Pool{}}
	return h
}

// run serves requests, pushes views every push interval and fans the
// feeds out, until stop is closed.
func (h *hub) run(stop <-chan struct{}) {
	defer close(h.stopped)
	for range renderers {
		go h.renderer()
	}
	t := time.NewTicker(h.pushInterval)
	defer t.Stop()
	for {
		h.wakeSome()
		jobs, next := h.renders.offer(h.jobs)
		select {
		case <-stop:
			for c := range h.clients {
				c.conn.Close()
			}
			return
		case r := <-h.requests:
			h.serve(r)
		case jobs <- next:
			h.renders.taken()
		case j := <-h.results:
			h.apply(j)
		case <-h.ran:
			h.wakes.out--
		case <-t.C:
			h.push()
		case a := <-h.alerts.in:
			h.alerts.add(a)
		case a := <-h.acts.in:
			h.acts.add(a)
		}
	}
}

func (h *hub) serve(r request) {
	c, k := r.c, r.key
	switch r.op {
	case join:
		h.clients[c] = struct{}{}
		h.count.Add(1)
	case leave:
		for _, k := range c.subs {
			h.release(c, k)
		}
		c.subs = nil
		delete(h.clients, c)
		h.count.Add(-1)
	case subscribe:
		if err := h.watch(c, k); err != nil {
			c.queueError(err.Error())
		}
	case unsubscribe:
		h.unwatch(c, k)
		c.dropView(k)
	}
}

// watch adds c to k's watchers and gives it the current version, or asks
// for the first one if nobody watched k.
func (h *hub) watch(c *client, k viewKey) error {
	if _, ok := h.clients[c]; !ok {
		return nil // it left meanwhile
	}
	if slices.Contains(c.subs, k) {
		return nil
	}
	if len(c.subs) >= maxSubscriptions {
		return fmt.Errorf("at most %d subscriptions per connection", maxSubscriptions)
	}
	v := h.views[k]
	if v == nil {
		if k.kind == viewRoom && h.roomViews >= maxRoomViews {
			return fmt.Errorf("the server already pushes %d room views, its limit: subscribe to this room later", maxRoomViews)
		}
		v = &watched{key: k, watchers: map[*client]struct{}{}}
		h.views[k] = v
		h.nviews.Add(1)
		if k.kind == viewRoom {
			h.roomViews++
		}
		if !k.feed() {
			h.renders.first(v)
		}
	}
	v.watchers[c] = struct{}{}
	c.subs = append(c.subs, k)
	if v.last.frame != nil {
		c.queueView(k, v.last.frame) // the current version at once
		c.notify()
	}
	return nil
}

// unwatch removes c from k's watchers.
func (h *hub) unwatch(c *client, k viewKey) {
	if i := slices.Index(c.subs, k); i >= 0 {
		c.subs = slices.Delete(c.subs, i, i+1)
		h.release(c, k)
	}
}

// release removes c from the watchers of k, one of its subscriptions, and
// forgets k when nobody is left.
func (h *hub) release(c *client, k viewKey) {
	v := h.views[k]
	if v == nil {
		return
	}
	delete(v.watchers, c)
	if len(v.watchers) > 0 {
		return
	}
	delete(h.views, k)
	h.nviews.Add(-1)
	if k.kind == viewRoom {
		h.roomViews--
	}
}

// ask hands a request to the hub; false once the hub has stopped.
func (h *hub) ask(r request) bool {
	select {
	case h.requests <- r:
		return true
	case <-h.stopped:
		return false
	}
}

// connected is how many clients the hub has, for the metric.
func (h *hub) connected() int64 { return h.count.Load() }

// watchedViews is how many distinct views the hub pushes, for the metric.
func (h *hub) watchedViews() int64 { return h.nviews.Load() }

// request is a reader's message to the hub.
type request struct {
	op  requestOp
	c   *client
	key viewKey
}

type requestOp int

const (
	join requestOp = iota
	leave
	subscribe
	unsubscribe
)
