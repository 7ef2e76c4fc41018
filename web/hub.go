package web

import (
	"bytes"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/chatpulse/chatpulse/throttle"
)

// hub pushes views to websocket clients. One goroutine (run) owns the set
// of clients, what each watches and the last version of each view pushed;
// readers send it their requests. Every push interval it computes each view
// that someone watches once, and only if it changed since the last push
// gives the same bytes to every watcher. A client keeps only the newest
// pending version of each view (latest wins), so a slow reader skips
// versions and holds nothing up: not the hub, not ingest, not other
// clients. Since only the hub queues views, a client never gets an older
// version after a newer one.
//
// The hub knows views only by their keys; its config computes them.
type hub struct {
	hubConfig
	upgrader websocket.Upgrader
	alerts   chan throttle.Alert
	requests chan request
	stopped  chan struct{} // closed when run returns
	count    atomic.Int64  // clients, for the metric

	// Owned by run.
	clients  map[*client]bool
	watchers map[viewKey]map[*client]bool
	last     map[viewKey]pushedView
}

// hubConfig is what a hub needs from the server it serves.
type hubConfig struct {
	// render computes a view: its JSON, and the same without as_of to
	// tell whether anything but the time changed.
	render       func(viewKey) (data, stamp []byte, err error)
	windows      func() []string // the configured windows, the default first
	pushInterval time.Duration
	checkOrigin  func(*http.Request) bool // may this request open a websocket?
}

func newHub(cfg hubConfig) *hub {
	h := &hub{
		hubConfig: cfg,
		alerts:    make(chan throttle.Alert, 256),
		requests:  make(chan request, 1024),
		stopped:   make(chan struct{}),
		clients:   map[*client]bool{},
		watchers:  map[viewKey]map[*client]bool{},
		last:      map[viewKey]pushedView{},
	}
	// Write buffers come from a pool and go back after each message, so an
	// idle client holds none.
	h.upgrader = websocket.Upgrader{CheckOrigin: cfg.checkOrigin, ReadBufferSize: 512, WriteBufferSize: 4096, WriteBufferPool: &sync.Pool{}}
	return h
}

// run serves requests, pushes views every push interval and fans alerts
// out, until stop is closed.
func (h *hub) run(stop <-chan struct{}) {
	defer close(h.stopped)
	t := time.NewTicker(h.pushInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			for c := range h.clients {
				c.conn.Close()
			}
			return
		case r := <-h.requests:
			h.serve(r)
		case <-t.C:
			h.push()
		case a := <-h.alerts:
			frame := alertFrame(a)
			for c := range h.clients {
				c.queueAlert(frame)
			}
		}
	}
}

func (h *hub) serve(r request) {
	c, k := r.c, r.key
	switch r.op {
	case join:
		h.clients[c] = true
		h.count.Add(1)
	case leave:
		for k := range h.watchers {
			h.unwatch(c, k)
		}
		delete(h.clients, c)
		h.count.Add(-1)
	case subscribe:
		if !h.clients[c] {
			return // it left meanwhile
		}
		if h.watchers[k] == nil {
			h.watchers[k] = map[*client]bool{}
		}
		h.watchers[k][c] = true
		v, ok := h.last[k]
		if !ok { // nobody watched it: compute it now
			data, stamp, err := h.render(k)
			if err != nil {
				c.queueError(err.Error())
				h.unwatch(c, k)
				return
			}
			v = pushedView{viewFrame(k, data), stamp}
			h.last[k] = v
		}
		c.queueView(k, v.frame) // the current version at once
	case unsubscribe:
		h.unwatch(c, k)
		c.dropView(k)
	}
}

func (h *hub) unwatch(c *client, k viewKey) {
	delete(h.watchers[k], c)
	if len(h.watchers[k]) == 0 {
		delete(h.watchers, k)
		delete(h.last, k)
	}
}

// push computes every watched view once and hands changed ones to their
// watchers.
func (h *hub) push() {
	for k, watchers := range h.watchers {
		data, stamp, err := h.render(k)
		if err != nil || bytes.Equal(h.last[k].stamp, stamp) {
			continue
		}
		v := pushedView{viewFrame(k, data), stamp}
		h.last[k] = v
		for c := range watchers {
			c.queueView(k, v.frame)
		}
	}
}

// alert sends an alert to every client. It never blocks: if the hub is
// that far behind, the alert is dropped (it is on NATS too).
func (h *hub) alert(a throttle.Alert) {
	select {
	case h.alerts <- a:
	default:
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

// pushedView is the last version of a view the hub pushed.
type pushedView struct {
	frame []byte // as sent
	stamp []byte // the data without as_of, to tell a change
}

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
