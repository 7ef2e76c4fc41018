package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	Received int64  // Unix ms it reached NATS, if known (JetStream), else 0
	Seq      uint64 // its stream sequence, if known (JetStream), else 0
	// Replay: handled before, by an earlier run or by the partition's
	// previous owner: it is counted again, but raises no alert and no dead
	// letter (those went out when it was first handled).
	Replay   bool
	CaughtUp bool // the last message of what its source had when it began
	Sink     Sink // where it is counted
}

// A Sink is where the events of the messages that name it are counted
// (engine.Stage is chatpulse's). The consumer calls Accept and Count on its
// loop's goroutine, and Throttle and Handled on its throttle goroutine, a
// batch behind, each for a run of consecutive messages of one sink; never
// two calls of one kind at once.
type Sink interface {
	// Accept says whether a decoded event belongs in the sink: nil, or
	// the error it is rejected with (docs/contract.md section 8's
	// subject_mismatch, in a group).
	Accept(m *Msg, ev *chat.Event) *Error
	// Count counts evs at now (Unix ms) and appends to late the indexes
	// of those older than every window, in order. It may mark a join or
	// a leave it counts nowhere (one that repeats its member's last) as
	// chat.KindRepeat: Throttle is given the batch as Count left it.
	Count(now int64, evs []chat.Event, late []int) []int
	// Throttle feeds evs to the throttle policies and calls alert with
	// each crossing of an event that is not a replay (replay[i]).
	Throttle(evs []chat.Event, replay []bool, alert func(throttle.Alert))
	// Handled says that every message up to stream sequence seq (0:
	// unknown) has been handled, and whether the one marked CaughtUp was
	// among them.
	Handled(seq uint64, caughtUp bool)
	// Quiet reports whether the sink is a second reading of events that
	// another sink reports: its rejections are neither counted nor
	// dead-lettered, and its messages are not in the metrics.
	Quiet() bool
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
	// Format is how payloads are read (--input); nil: chatpulse's own
	// (Native).
	Format *Format
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

// Consumer reads events from a Source into the sinks they name.
type Consumer struct {
	cfg Config
	m   *metrics
	// filed is how the messages marked with FiledHeader are read:
	// cfg.Format.Filed(); nil when that is cfg.Format's own reading (the
	// native format), so that no header is looked at.
	filed *Format

	handled atomic.Uint64 // messages handled, of every kind
	done    chan struct{} // closed when the loop has handled everything

	// gate is held by the loop while it handles a batch, and by Pause;
	// inflight counts the batches handed to the throttle goroutine and
	// not finished yet. Pause waits on drained (its L is drainMu) for
	// inflight to reach 0, and says so in pausing. See Pause.
	gate     sync.Mutex
	inflight atomic.Int32
	pausing  atomic.Bool
	drainMu  sync.Mutex
	drained  sync.Cond

	// scratch of handle, owned by the loop
	from []int
	late []int
}

// New returns a consumer; Start starts it.
func New(reg prometheus.Registerer, cfg Config) *Consumer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Format == nil {
		cfg.Format = Native()
	}
	c := &Consumer{cfg: cfg, m: newMetrics(reg), done: make(chan struct{})}
	if !cfg.Format.Native() {
		c.filed = cfg.Format.Filed()
	}
	c.drained.L = &c.drainMu
	return c
}

// Handled is the number of messages handled so far, counted or not.
func (c *Consumer) Handled() uint64 { return c.handled.Load() }

// Start handles what src delivers, on goroutines of its own, until it
// stops.
func (c *Consumer) Start(src Source) { go c.loop(src) }

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

// Pause runs fn while nothing changes the sinks: between two batches, once
// every message handled so far has gone through the throttle policies too.
// So what fn reads of the sinks (their state, and Seq) is the effect of
// exactly the messages up to some point of each source. Ingest waits
// meanwhile: keep fn short (copy, do not encode).
//
// Pause holds gate, so no batch starts: inflight only falls. It sets
// pausing, then waits on drained while inflight > 0. The throttle
// goroutine, when it brings inflight to 0, broadcasts on drained if
// pausing is set. No wake-up is lost. Go's atomics are sequentially
// consistent, so of Pause (store pausing, load inflight) and the
// throttle goroutine (decrement inflight, load pausing) one sees the
// other's write: Pause sees 0 and does not wait, or the throttle
// goroutine sees pausing and broadcasts. It broadcasts under drainMu,
// which Pause holds from its load until Wait has queued it, so the
// broadcast comes after. The hot path pays one atomic load per batch
// that leaves inflight at 0.
func (c *Consumer) Pause(fn func()) {
	c.gate.Lock()
	defer c.gate.Unlock()
	c.pausing.Store(true)
	c.drainMu.Lock()
	for c.inflight.Load() > 0 { // at most two batches' throttling away
		c.drained.Wait()
	}
	c.drainMu.Unlock()
	c.pausing.Store(false)
	fn()
}

// batchThrottled ends a batch's throttling, and wakes Pause if it waits
// for the last one.
func (c *Consumer) batchThrottled() {
	if c.inflight.Add(-1) == 0 && c.pausing.Load() {
		c.drainMu.Lock()
		c.drained.Broadcast()
		c.drainMu.Unlock()
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
			c.batchThrottled()
			free <- j
		}
	}()
	batch := make([]Msg, 0, batchSize)
	for more := true; more; {
		batch, more = src.Next(batch[:0])
		if len(batch) > 0 {
			j := <-free // waits while the throttle goroutine is two batches behind
			c.gate.Lock()
			c.inflight.Add(1)
			c.handle(batch, j)
			c.gate.Unlock()
			work <- j
		}
	}
	close(work)
	<-throttled
	close(c.done)
}

// job is a batch's work for the throttle goroutine: the events the
// aggregators counted, in runs of one sink each, and the batch's numbers,
// reported once it is done.
type job struct {
	evs                         []chat.Event
	replay                      []bool
	runs                        []run
	messages, received, ignored int
}

// run is the part of a batch that went to one sink: its events are
// evs[start:end] of the job.
type run struct {
	sink       Sink
	start, end int
	seq        uint64 // the newest stream sequence among its messages
	caughtUp   bool
}

// handle decodes a batch, counts what is good, dead-letters the rest, and
// fills j with what the throttle policies must see. Consecutive messages
// for one sink are handled as one run, under one taking of its locks.
func (c *Consumer) handle(batch []Msg, j *job) {
	nowMs := c.cfg.Now().UnixMilli()
	*j = job{evs: j.evs[:0], replay: j.replay[:0], runs: j.runs[:0], messages: len(batch)}
	for start := 0; start < len(batch); {
		s := batch[start].Sink
		end := start + 1
		for end < len(batch) && batch[end].Sink == s {
			end++
		}
		c.handleRun(batch[start:end], s, nowMs, j)
		start = end
	}
}

// handleRun handles messages for one sink.
func (c *Consumer) handleRun(msgs []Msg, s Sink, nowMs int64, j *job) {
	skew := c.cfg.MaxSkew.Milliseconds()
	quiet := s.Quiet()
	r := run{sink: s, start: len(j.evs)}
	c.from = c.from[:0]
	for i := range msgs {
		m := &msgs[i]
		r.caughtUp = r.caughtUp || m.CaughtUp
		r.seq = max(r.seq, m.Seq)
		if c.cfg.Own != "" && strings.HasPrefix(m.Subject, c.cfg.Own) {
			continue // never our own subjects, whatever the filter says
		}
		if !quiet {
			j.received++
		}
		received := nowMs
		if m.Received != 0 {
			received = m.Received
		}
		format := c.cfg.Format
		if c.filed != nil && m.Header[FiledHeader] != nil {
			format = c.filed
		}
		ev, err := format.Decode(m.Data, received, skew)
		switch {
		case err != nil:
			c.reject(m, s, err)
		// Messages, joins and leaves all go to the sink: its counters and
		// policies each take the kinds they count (docs/contract.md
		// section 12).
		case !ev.Counted:
			if !quiet {
				j.ignored++
			}
		default:
			// The sink is asked about the event where it is kept: a
			// pointer to ev handed to an interface would make ev escape,
			// an allocation for every message.
			j.evs = append(j.evs, ev.Event)
			if e := s.Accept(m, &j.evs[len(j.evs)-1]); e != nil {
				j.evs = j.evs[:len(j.evs)-1]
				c.reject(m, s, e)
			} else {
				c.from = append(c.from, i)
			}
		}
	}
	// The run's events are counted where they are, in the job, and the
	// late ones (rare) taken out after, the others moving up in order.
	evs := j.evs[r.start:]
	c.late = s.Count(nowMs, evs, c.late[:0])
	late, kept := c.late, r.start
	for k := range evs {
		m := &msgs[c.from[k]]
		if len(late) > 0 && late[0] == k {
			late = late[1:]
			c.reject(m, s, &Error{Reason: ReasonLate, Msg: fmt.Sprintf("ts %s: older than every window", chat.Time(evs[k].TS))})
			continue
		}
		if kept != r.start+k {
			j.evs[kept] = evs[k]
		}
		kept++
		j.replay = append(j.replay, m.Replay)
	}
	clear(j.evs[kept:]) // let the payloads of the late ones go
	j.evs = j.evs[:kept]
	r.end = kept
	j.runs = append(j.runs, r)
}

// throttle feeds a job's events to the policies of their sinks, then
// reports the batch. Until then the batch does not show in the metrics or
// in Handled, so that whoever waits for a message to be received sees its
// throttle state too.
func (c *Consumer) throttle(j *job) {
	accepted := 0
	for _, r := range j.runs {
		evs := j.evs[r.start:r.end]
		r.sink.Throttle(evs, j.replay[r.start:r.end], c.cfg.OnAlert)
		if !r.sink.Quiet() {
			accepted += len(evs)
		}
		r.sink.Handled(r.seq, r.caughtUp)
	}
	c.m.received.Add(float64(j.received))
	c.m.ignored.Add(float64(j.ignored))
	c.m.accepted.Add(float64(accepted))
	c.handled.Add(uint64(j.messages))
	clear(j.evs) // let the payloads go
}

// reject counts a rejected message and hands it to OnReject, to be
// dead-lettered. Replayed messages were dead-lettered when they first
// arrived, and are not again; a quiet sink's are another sink's to report.
func (c *Consumer) reject(m *Msg, s Sink, err *Error) {
	if s.Quiet() {
		return
	}
	c.m.rejected[err.Reason].Inc()
	if !m.Replay && c.cfg.OnReject != nil {
		c.cfg.OnReject(m, err)
	}
}

// Unfiled counts a message that a group's filer read from a foreign bus
// and did not file (docs/contract.md section 13): received, and ignored
// (reason "") or rejected for reason. What it files is counted where the
// partitions read it, so each message is counted once, as standalone.
func (c *Consumer) Unfiled(reason Reason) {
	c.m.received.Inc()
	if reason == "" {
		c.m.ignored.Inc()
		return
	}
	c.m.rejected[reason].Inc()
}
