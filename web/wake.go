package web

// How a push wakes its clients' writers: a batch at a time.
//
// Waking every client a push gave something at once makes thousands of
// writers runnable together. The Go scheduler runs them first come, first
// served, and a goroutine the network readies meanwhile (the HTTP
// server's accept, a /healthz, a fresh client's handshake, NATS's reader)
// joins the queue behind all of them: with thousands of clients the whole
// process answered nothing else, each push, for as long as writing to
// every client took (docs/performance.md, "A crowd of dashboards").
//
// So the hub queues the clients of a push and keeps at most wakeBatch of
// them woken and not yet running. A woken writer hands its place back
// (hub.ran) as soon as it runs, before it writes, and the hub wakes the
// next. Everything else waits behind a batch of writers, never behind
// all of them.
//
// Only a writer parked waiting for work takes a place: one still writing
// (a slow client, its write blocked until the deadline) is woken without
// one, and finds the wake-up when it is done. So slow clients hold up no
// one. Each writer's state (writerBusy, writerParked, writerWoken) says
// which: the writer parks and unparks itself, and only the hub moves it
// from parked to woken, so exactly one of them sees each place and the
// writer gives it back whatever woke it.
//
// A client is in the queue once however many pushes give it something
// before it is woken; its writer then sends the newest of each view
// (latest wins). A client that left is skipped.

// wakeBatch is how many clients may be woken and not yet running: enough
// to keep every core writing, few enough that a goroutine behind them
// waits a millisecond or so.
const wakeBatch = 32

// A writer's states (client.writer).
const (
	writerBusy   int32 = iota // running, or not yet started
	writerParked              // waiting for a wake-up or a ping
	writerWoken               // parked, then given a place by the hub
)

// wakeQueue is the clients that pushes gave something, waiting to be
// woken. The hub owns it.
type wakeQueue struct {
	clients []*client // clients[next:] wait
	next    int
	out     int // places given, not yet handed back: at most wakeBatch
}

// wake queues the clients a push gave something. Each is touched, and
// stays so until it is woken, so it is queued once.
func (q *wakeQueue) wake(cs []*client) {
	q.clients = append(q.clients, cs...)
}

// wakeSome wakes queued clients while fewer than wakeBatch places are
// out.
func (h *hub) wakeSome() {
	q := &h.wakes
	for q.out < wakeBatch && q.next < len(q.clients) {
		c := q.clients[q.next]
		q.clients[q.next] = nil
		q.next++
		c.touched = false
		if _, ok := h.clients[c]; !ok {
			continue // it left
		}
		if c.writer.CompareAndSwap(writerParked, writerWoken) {
			q.out++
		}
		c.notify()
	}
	if q.next == len(q.clients) {
		q.clients, q.next = q.clients[:0], 0
	}
}

// parked says that c's writer waits for work.
func (c *client) parked() { c.writer.Store(writerParked) }

// running says that c's writer runs, and gives its place back to the hub
// if it had one.
func (c *client) running() {
	if c.writer.Swap(writerBusy) == writerWoken {
		c.hub.ran <- struct{}{} // never blocks: at most wakeBatch places are out
	}
}
