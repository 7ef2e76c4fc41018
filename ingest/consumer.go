package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/throttle"
)

// batchSize is the most messages handled as one batch.
const batchSize = 1024

// Msg is one message as chatpulse received it, whatever delivered it.
type Msg struct {
	Subject  string
	Data     []byte
	Header   map[string][]string
	Received int64 // Unix ms it reached NATS, if known (JetStream), else 0
	Replay   bool  // read while catching up: no alerts, no dead letters
	CaughtUp bool  // the last message of the replay
}

// A Source delivers messages. Next waits until at least one has arrived or
// delivery has stopped, then appends to buf what has arrived, up to
// cap(buf), without waiting for more. It returns false once delivery has
// stopped and every message has been returned.
type Source interface {
	Next(buf []Msg) ([]Msg, bool)
}

// Config says what to do beside counting.
type Config struct {
	// Own is the subject prefix of chatpulse's own messages, which are
	// never counted, whatever a source delivers.
	Own     string
	MaxSkew time.Duration // ts further ahead of its arrival than this is rejected as future
	Now     func() time.Time
	Log     *slog.Logger
	// OnReject is called, on the consumer's goroutine, for each rejected
	// message that is not a replay: the dead letter to publish.
	OnReject func(m *Msg, err *Error)
	// OnAlert is called, on the consumer's goroutine, for each alert of a
	// live (not replayed) message.
	OnAlert func(throttle.Alert)
}

// Consumer reads events from a Source into the aggregator and the throttle
// set.
type Consumer struct {
	cfg Config
	agg *aggregator.Aggregator
	thr *throttle.Set
	m   *metrics

	ready   atomic.Bool
	handled atomic.Uint64 // messages handled, of every kind
	done    chan struct{} // closed when the loop has handled everything

	// scratch of handle, owned by the loop
	evs     []chat.Event
	decoded []Event
	from    []int
	late    []int
}

// New returns a consumer; Start starts it.
func New(agg *aggregator.Aggregator, thr *throttle.Set, reg prometheus.Registerer, cfg Config) *Consumer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Consumer{cfg: cfg, agg: agg, thr: thr, m: newMetrics(reg), done: make(chan struct{})}
}

// Ready reports whether the consumer has caught up with its source: it has
// handled the message marked CaughtUp, or was started with nothing to
// replay.
func (c *Consumer) Ready() bool { return c.ready.Load() }

// Handled is the number of messages handled so far, counted or not.
func (c *Consumer) Handled() uint64 { return c.handled.Load() }

// Start handles what src delivers, on goroutines of its own, until it
// stops. replaying says that src begins with a replay, ended by a message
// marked CaughtUp; until that one is handled the consumer is not Ready.
func (c *Consumer) Start(src Source, replaying bool) {
	c.ready.Store(!replaying)
	go c.loop(src)
}

// Wait returns once every message the source delivered has been handled
// (stop the source first), or ctx is done.
func (c *Consumer) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop handles messages in batches of what has arrived, up to batchSize,
// until the source stops. It decodes, counts and dead-letters; the throttle
// policies are fed on a second goroutine, so the two run side by side, one
// batch apart.
func (c *Consumer) loop(src Source) {
	work, free := make(chan *job, 1), make(chan *job, 2)
	free <- &job{}
	free <- &job{}
	throttled := make(chan struct{})
	go func() {
		defer close(throttled)
		for j := range work {
			c.throttle(j)
			free <- j
		}
	}()
	batch := make([]Msg, 0, batchSize)
	for more := true; more; {
		batch, more = src.Next(batch[:0])
		if len(batch) > 0 {
			j := <-free // waits while the throttle goroutine is two batches behind
			c.handle(batch, j)
			work <- j
		}
	}
	close(work)
	<-throttled
	close(c.done)
}

// job is a batch's work for the throttle goroutine: the events the
// aggregator counted, and the batch's numbers, reported once it is done.
type job struct {
	evs                         []chat.Event
	replay                      []bool
	messages, received, ignored int
	caughtUp                    bool
}

// handle decodes a batch, counts what is good, dead-letters the rest, and
// fills j with what the throttle policies must see.
func (c *Consumer) handle(batch []Msg, j *job) {
	now := c.cfg.Now()
	nowMs := now.UnixMilli()
	skew := c.cfg.MaxSkew.Milliseconds()
	c.evs, c.decoded, c.from = c.evs[:0], c.decoded[:0], c.from[:0]
	*j = job{evs: j.evs[:0], replay: j.replay[:0], messages: len(batch)}
	for i := range batch {
		m := &batch[i]
		j.caughtUp = j.caughtUp || m.CaughtUp
		if c.cfg.Own != "" && strings.HasPrefix(m.Subject, c.cfg.Own) {
			continue // never our own subjects, whatever the filter says
		}
		j.received++
		received := nowMs
		if m.Received != 0 {
			received = m.Received
		}
		ev, err := Decode(m.Data, received, skew)
		if err != nil {
			c.reject(m, err.(*Error))
			continue
		}
		if !ev.Counted {
			j.ignored++
			continue
		}
		c.decoded = append(c.decoded, ev)
		c.from = append(c.from, i)
		c.evs = append(c.evs, ev.Event)
	}
	c.late = c.agg.Observe(nowMs, c.evs, c.late[:0])
	late := c.late
	for k := range c.decoded {
		ev, m := &c.decoded[k], &batch[c.from[k]]
		if len(late) > 0 && late[0] == k {
			late = late[1:]
			c.reject(m, &Error{Reason: ReasonLate, Msg: fmt.Sprintf("ts %s: older than every window", chat.Time(ev.TS))})
			continue
		}
		j.evs = append(j.evs, ev.Event)
		j.replay = append(j.replay, m.Replay)
	}
}

// throttle feeds a job's events to the policies, then reports the batch.
// Until then the batch does not show in the metrics or in Handled, so that
// whoever waits for a message to be received sees its throttle state too.
func (c *Consumer) throttle(j *job) {
	c.thr.ObserveBatch(j.evs, func(i int, a throttle.Alert) {
		if !j.replay[i] && c.cfg.OnAlert != nil { // a replayed event's alert went out when it was live
			c.cfg.OnAlert(a)
		}
	})
	c.m.received.Add(float64(j.received))
	c.m.ignored.Add(float64(j.ignored))
	c.m.accepted.Add(float64(len(j.evs)))
	c.handled.Add(uint64(j.messages))
	if j.caughtUp && !c.ready.Load() {
		c.ready.Store(true)
		c.cfg.Log.Info("replay caught up")
	}
	clear(j.evs) // let the payloads go
}

// reject counts a rejected message and hands it to OnReject, to be
// dead-lettered. Replayed messages were dead-lettered when they first
// arrived, and are not again.
func (c *Consumer) reject(m *Msg, err *Error) {
	c.m.rejected[err.Reason].Inc()
	if !m.Replay && c.cfg.OnReject != nil {
		c.cfg.OnReject(m, err)
	}
}
