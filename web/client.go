package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"
)

// Websocket limits.
const (
	writeWait        = 10 * time.Second // a write that takes longer drops the client
	pongWait         = 60 * time.Second // a peer silent for longer is gone
	pingPeriod       = pongWait * 9 / 10
	maxFrame         = 4 << 10 // client frames are small JSON requests
	maxSubscriptions = 64      // per connection
	maxAlertsQueued  = 64      // per connection; older ones are dropped first
	framesPerSecond  = 20      // client frames, with a burst of twice that
)

// client is one websocket connection: one reader goroutine, which owns its
// subscriptions and the rate of its requests, and one writer goroutine.
// Between the hub and the writer sit the pending frames: the newest unsent
// version of each view (latest wins), the alerts and the errors.
type client struct {
	hub     *hub
	conn    *websocket.Conn
	wake    chan struct{} // something is pending
	limiter *rate.Limiter
	subs    map[viewKey]bool // owned by the reader

	mu      sync.Mutex
	pending map[viewKey][]byte // the newest unsent frame of each view
	order   []viewKey          // pending keys in the order they came
	alerts  [][]byte
	errs    [][]byte
	closed  bool
}

// serveWS upgrades a request to a websocket client.
func (h *hub) serveWS(w http.ResponseWriter, r *http.Request) {
	conn, err := h.upgrader.Upgrade(w, r, nil) // answers 403 for a foreign origin
	if err != nil {
		return
	}
	c := &client{hub: h, conn: conn, wake: make(chan struct{}, 1), pending: map[viewKey][]byte{},
		subs: map[viewKey]bool{}, limiter: rate.NewLimiter(framesPerSecond, 2*framesPerSecond)}
	if !h.ask(request{op: join, c: c}) {
		conn.Close()
		return
	}
	// Both loops get goroutines of their own, and the handler returns, so
	// the HTTP server's goroutine and its buffers for this connection go.
	go c.writeLoop()
	go c.readLoop()
}

func (c *client) readLoop() {
	defer c.leave()
	c.conn.SetReadLimit(maxFrame)
	c.conn.SetReadDeadline(time.Now().Add(pongWait))
	c.conn.SetPongHandler(func(string) error { c.conn.SetReadDeadline(time.Now().Add(pongWait)); return nil })
	for {
		_, data, err := c.conn.ReadMessage()
		if err != nil {
			return
		}
		c.conn.SetReadDeadline(time.Now().Add(pongWait))
		if !c.limiter.Allow() {
			c.queueError(fmt.Sprintf("too many requests: at most %d a second", framesPerSecond))
			continue
		}
		if err := c.handle(data); err != nil {
			c.queueError(err.Error())
		}
	}
}

// handle parses and checks a frame from the browser and hands the hub what
// it asks for.
func (c *client) handle(data []byte) error {
	var m clientMsg
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf(`frames are JSON objects like {"type":"subscribe","view":"overview","window":"1m"}: %v`, err)
	}
	if m.Type != "subscribe" && m.Type != "unsubscribe" {
		return fmt.Errorf("type must be subscribe or unsubscribe, got %q", m.Type)
	}
	k, err := m.key(c.hub.windows())
	if err != nil {
		return err
	}
	switch m.Type {
	case "subscribe":
		if c.subs[k] {
			return nil
		}
		if len(c.subs) >= maxSubscriptions {
			return fmt.Errorf("at most %d subscriptions per connection", maxSubscriptions)
		}
		c.subs[k] = true
		c.hub.ask(request{op: subscribe, c: c, key: k})
	case "unsubscribe":
		if c.subs[k] {
			delete(c.subs, k)
			c.hub.ask(request{op: unsubscribe, c: c, key: k})
		}
	}
	return nil
}

// leave tells the hub a client's connection ended and wakes its writer,
// which closes it.
func (c *client) leave() {
	c.hub.ask(request{op: leave, c: c})
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.notify()
	c.conn.Close()
}

func (c *client) writeLoop() {
	ping := time.NewTicker(pingPeriod)
	defer func() {
		ping.Stop()
		c.conn.Close() // ends the reader too
	}()
	var frames [][]byte
	for {
		select {
		case <-c.wake:
			frames = c.take(frames[:0])
			for _, f := range frames {
				c.conn.SetWriteDeadline(time.Now().Add(writeWait))
				if err := c.conn.WriteMessage(websocket.TextMessage, f); err != nil {
					return
				}
			}
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return
			}
		case <-ping.C:
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				return
			}
		}
	}
}

// take empties the client's queues: errors, then views, then alerts.
func (c *client) take(frames [][]byte) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames = append(frames, c.errs...)
	for _, k := range c.order {
		if f, ok := c.pending[k]; ok {
			frames = append(frames, f)
		}
	}
	frames = append(frames, c.alerts...)
	clear(c.pending)
	c.order, c.alerts, c.errs = c.order[:0], nil, nil
	return frames
}

// queueView replaces any unsent version of the view: latest wins.
func (c *client) queueView(k viewKey, frame []byte) {
	c.mu.Lock()
	if _, ok := c.pending[k]; !ok {
		c.order = append(c.order, k)
	}
	c.pending[k] = frame
	c.mu.Unlock()
	c.notify()
}

// dropView forgets an unsent version of a view no longer watched.
func (c *client) dropView(k viewKey) {
	c.mu.Lock()
	delete(c.pending, k)
	c.mu.Unlock()
}

func (c *client) queueAlert(frame []byte) {
	c.mu.Lock()
	if len(c.alerts) == maxAlertsQueued {
		c.alerts = c.alerts[1:]
	}
	c.alerts = append(c.alerts, frame)
	c.mu.Unlock()
	c.notify()
}

func (c *client) queueError(msg string) {
	c.mu.Lock()
	if len(c.errs) < maxAlertsQueued {
		c.errs = append(c.errs, errorFrame(msg))
	}
	c.mu.Unlock()
	c.notify()
}

func (c *client) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
