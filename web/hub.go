package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/chatpulse/chatpulse/throttle"
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

type viewKind string

const (
	viewOverview viewKind = "overview"
	viewRoom     viewKind = "room"
	viewRooms    viewKind = "rooms" // the rooms list, an addition to the contract's two views
)

// viewKey names one pushed view; window is always a configured name.
type viewKey struct {
	kind   viewKind
	window string
	room   string
}

// Hub pushes views to websocket clients. One goroutine (Run) owns the set
// of clients and what each watches; readers send it their requests. Every
// push interval it computes each view that someone watches once, and only
// if it changed since the last push gives the same bytes to every watcher.
// A client keeps only the newest pending version of each view (latest
// wins), so a slow reader skips versions and holds nothing up: not the hub,
// not ingest, not other clients. Since only the hub queues views, a client
// never gets an older version after a newer one.
type Hub struct {
	s        *Server
	upgrader websocket.Upgrader
	alerts   chan throttle.Alert
	requests chan request
	stopped  chan struct{} // closed when Run returns
	count    atomic.Int64  // clients, for the metric

	// Owned by Run.
	clients  map[*client]bool
	watchers map[viewKey]map[*client]bool
	last     map[viewKey]pushedView
}

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

func newHub(s *Server) *Hub {
	h := &Hub{
		s:        s,
		alerts:   make(chan throttle.Alert, 256),
		requests: make(chan request, 1024),
		stopped:  make(chan struct{}),
		clients:  map[*client]bool{},
		watchers: map[viewKey]map[*client]bool{},
		last:     map[viewKey]pushedView{},
	}
	// Write buffers come from a pool and go back after each message, so an
	// idle client holds none.
	h.upgrader = websocket.Upgrader{CheckOrigin: h.checkOrigin, ReadBufferSize: 512, WriteBufferSize: 4096, WriteBufferPool: &sync.Pool{}}
	s.opts.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatpulse_ws_clients", Help: "Websocket clients connected.",
	}, func() float64 { return float64(h.count.Load()) }))
	return h
}

// checkOrigin allows requests without an Origin (not from a browser), from
// the same origin, and from --allowed-origins; anything else gets 403, so no
// other site can open a websocket with a visitor's browser.
func (h *Hub) checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, o := range h.s.opts.AllowedOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	return false
}

// Alert sends an alert to every dashboard. It never blocks: if the hub is
// that far behind, the alert is dropped (it is on NATS too).
func (h *Hub) Alert(a throttle.Alert) {
	select {
	case h.alerts <- a:
	default:
	}
}

// ask hands a request to the hub; false once the hub has stopped.
func (h *Hub) ask(r request) bool {
	select {
	case h.requests <- r:
		return true
	case <-h.stopped:
		return false
	}
}

// Run serves requests, pushes views every push interval and fans alerts
// out, until stop is closed.
func (h *Hub) Run(stop <-chan struct{}) {
	defer close(h.stopped)
	t := time.NewTicker(h.s.opts.PushInterval)
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
			frame, _ := json.Marshal(struct {
				Type string         `json:"type"`
				Data throttle.Alert `json:"data"`
			}{"alert", a})
			for c := range h.clients {
				c.queueAlert(frame)
			}
		}
	}
}

func (h *Hub) serve(r request) {
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
			data, stamp, err := h.s.pushed(k)
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

func (h *Hub) unwatch(c *client, k viewKey) {
	delete(h.watchers[k], c)
	if len(h.watchers[k]) == 0 {
		delete(h.watchers, k)
		delete(h.last, k)
	}
}

// push computes every watched view once and hands changed ones to their
// watchers.
func (h *Hub) push() {
	for k, watchers := range h.watchers {
		data, stamp, err := h.s.pushed(k)
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

// pushed computes a view for the hub: its JSON, and the same without as_of
// to tell whether anything but the time changed. k is valid; pushed views
// list the default number of top users and rooms, and up to maxLimit rooms.
func (s *Server) pushed(k viewKey) (data, stamp []byte, err error) {
	now := s.nowMs()
	var v any
	switch k.kind {
	case viewOverview:
		v, err = s.views.Overview(k.window, defaultK, now)
	case viewRoom:
		v, err = s.views.Room(k.room, k.window, defaultK, now)
	case viewRooms:
		v, err = s.views.Rooms(k.window, maxLimit, now)
	}
	if err != nil {
		return nil, nil, err
	}
	if data, err = json.Marshal(v); err != nil {
		return nil, nil, err
	}
	return data, withoutAsOf(data), nil
}

// withoutAsOf blanks the as_of value of a view's JSON.
func withoutAsOf(data []byte) []byte {
	const field = `"as_of":"`
	i := bytes.Index(data, []byte(field))
	if i < 0 {
		return data
	}
	j := bytes.IndexByte(data[i+len(field):], '"')
	if j < 0 {
		return data
	}
	return slices.Concat(data[:i+len(field)], data[i+len(field)+j:])
}

func viewFrame(k viewKey, data []byte) []byte {
	head, _ := json.Marshal(struct {
		Type   string   `json:"type"`
		View   viewKind `json:"view"`
		Window string   `json:"window"`
		Room   string   `json:"room"`
	}{"view", k.kind, k.window, k.room})
	return slices.Concat(head[:len(head)-1], []byte(`,"data":`), data, []byte("}"))
}

func errorFrame(msg string) []byte {
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error string `json:"error"`
	}{"error", msg})
	return b
}

// serveWS upgrades a request to a websocket client.
func (h *Hub) serveWS(w http.ResponseWriter, r *http.Request) {
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

// client is one websocket connection: one reader goroutine, one writer.
type client struct {
	hub     *Hub
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

func (c *client) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
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

// clientMsg is a frame from the browser.
type clientMsg struct {
	Type   string   `json:"type"`
	View   viewKind `json:"view"`
	Window string   `json:"window"`
	Room   string   `json:"room"`
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
	k, err := c.hub.s.key(m)
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

// key validates a subscription and names it canonically.
func (s *Server) key(m clientMsg) (viewKey, error) {
	win, err := windowName(m.Window, s.views.WindowNames())
	if err != nil {
		return viewKey{}, err
	}
	k := viewKey{kind: m.View, window: win}
	switch m.View {
	case viewOverview, viewRooms:
		if m.Room != "" {
			return k, fmt.Errorf("view %s takes no room", m.View)
		}
	case viewRoom:
		if err := checkName("room", m.Room); err != nil {
			return k, err
		}
		k.room = m.Room
	default:
		return k, fmt.Errorf("view must be overview, room or rooms, got %q", m.View)
	}
	return k, nil
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
