package web

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
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
	maxErrorsQueued  = 64      // per connection; later ones are dropped
	framesPerSecond  = 20      // client frames, with a burst of twice that
)

// client is one websocket connection: one reader goroutine, which owns the
// rate of its requests, and one writer goroutine. The hub owns what it
// watches. Between the hub and the writer sit the pending frames: the
// newest unsent version of each view (latest wins), the feeds' frames
// and the errors; the writer sends all of them in one write to the network.
type client struct {
	hub     *hub
	conn    *websocket.Conn
	out     *batchConn // conn's network connection
	wake    chan struct{}
	limiter *rate.Limiter

	// Owned by the hub.
	subs    []viewKey    // what it watches, at most maxSubscriptions
	touched bool         // given something by a push, and not yet woken
	writer  atomic.Int32 // writerBusy, writerParked or writerWoken (wake.go)

	mu      sync.Mutex
	pending []pendingView // in the order they came
	feeds   [numFeeds]feedQueue
	errs    [][]byte
	closed  bool
}

// feedQueue is a client's unsent frames of one feed.
type feedQueue struct {
	frames []feedFrame // at most maxFeedFrames
	lost   int64       // items in frames dropped unsent
}

// pendingView is the newest unsent frame of a view.
type pendingView struct {
	key   viewKey
	frame []byte
}

// serveWS upgrades a request to a websocket client.
func (h *hub) serveWS(w http.ResponseWriter, r *http.Request) {
	hw := &hijackWriter{ResponseWriter: w}
	conn, err := h.upgrader.Upgrade(hw, r, nil) // answers 403 for a foreign origin
	if err != nil {
		return
	}
	c := &client{hub: h, conn: conn, out: hw.conn, wake: make(chan struct{}, 1),
		limiter: rate.NewLimiter(framesPerSecond, 2*framesPerSecond)}
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

// handle hands the hub what a frame from the browser asks for.
func (c *client) handle(data []byte) error {
	op, k, err := parseFrame(data, c.hub.windows(), c.hub.maxName)
	if err != nil {
		return err
	}
	c.hub.ask(request{op: op, c: c, key: k})
	return nil
}

// parseFrame parses and checks a frame from the browser: a subscription or
// an unsubscription of a valid view. A frame is read as strictly as any
// request (decodeObject): exact field names, and a room that says exactly
// what it unescapes to.
func parseFrame(data []byte, windows []string, maxName int) (requestOp, viewKey, error) {
	f, err := decodeObject(data, frameShape, frameFields)
	if err != nil {
		return 0, viewKey{}, err
	}
	m := clientMsg{Type: f["type"], View: viewKind(f["view"]), Window: f["window"], Room: f["room"]}
	var op requestOp
	switch m.Type {
	case "subscribe":
		op = subscribe
	case "unsubscribe":
		op = unsubscribe
	default:
		return 0, viewKey{}, fmt.Errorf("type must be subscribe or unsubscribe, got %q", m.Type)
	}
	k, err := m.key(windows, maxName)
	return op, k, err
}

const frameShape = `frames are JSON objects like {"type":"subscribe","view":"overview","window":"1m"}`

var frameFields = map[string]kind{"type": text, "view": text, "window": text, "room": name}

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
		c.parked()
		select {
		case <-c.wake:
			c.running()
			var closed bool
			frames, closed = c.take(frames[:0])
			err := c.write(frames)
			clear(frames) // hold no frame while idle
			if err != nil || closed {
				return
			}
		case <-ping.C:
			c.running()
			if err := c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				return
			}
		}
	}
}

// write sends frames in one write to the network.
func (c *client) write(frames [][]byte) error {
	if len(frames) == 0 {
		return nil
	}
	c.out.gather()
	for _, f := range frames {
		c.conn.SetWriteDeadline(time.Now().Add(writeWait))
		if err := c.conn.WriteMessage(websocket.TextMessage, f); err != nil {
			c.out.flush()
			return err
		}
	}
	return c.out.flush()
}

// take empties the client's queues (errors, then views, then the feeds),
// and says whether the client has left.
func (c *client) take(frames [][]byte) ([][]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames = append(frames, c.errs...)
	for _, p := range c.pending {
		frames = append(frames, p.frame)
	}
	for k := range c.feeds {
		q := &c.feeds[k]
		if q.lost > 0 {
			frames = append(frames, newFeedFrame[struct{}](feedKind(k), nil, q.lost).frame)
		}
		for _, f := range q.frames {
			frames = append(frames, f.frame)
		}
		clear(q.frames)
		q.frames, q.lost = q.frames[:0], 0
	}
	clear(c.pending)
	c.pending, c.errs = c.pending[:0], nil
	return frames, c.closed
}

// queueView replaces any unsent version of the view: latest wins. The
// caller wakes the writer.
func (c *client) queueView(k viewKey, frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.pending {
		if c.pending[i].key == k {
			c.pending[i].frame = frame
			return
		}
	}
	c.pending = append(c.pending, pendingView{k, frame})
}

// dropView forgets an unsent version of a view no longer watched.
func (c *client) dropView(k viewKey) {
	c.mu.Lock()
	c.pending = slices.DeleteFunc(c.pending, func(p pendingView) bool { return p.key == k })
	c.mu.Unlock()
}

// queueFeed queues a push's frame of a feed; a client that has not
// written for maxFeedFrames pushes loses the oldest, and is told how many
// items it lost. The caller wakes the writer.
func (c *client) queueFeed(f feedFrame) {
	c.mu.Lock()
	q := &c.feeds[f.kind]
	if len(q.frames) == maxFeedFrames {
		q.lost += q.frames[0].n
		q.frames = append(q.frames[:0], q.frames[1:]...)
	}
	q.frames = append(q.frames, f)
	c.mu.Unlock()
}

func (c *client) queueError(msg string) {
	c.mu.Lock()
	if len(c.errs) < maxErrorsQueued {
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
