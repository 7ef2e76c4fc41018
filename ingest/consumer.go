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
	Received int64  // Unix ms it reached NATS, if known (JetStream), else 0
	Seq      uint64 // its stream sequence, if known (JetStream), else 0
	Replay   bool   // handled before (by an earlier run): no alerts, no dead letters
	CaughtUp bool   // the last message of the replay
	Sink     *Sink  // where it is counted; nil: the consumer's own sink
}

// A Sink is where events are counted: an aggregator and the throttle
// policies that go with it. A consumer has one of its own; in a group,
// each partition's stage is a sink, and each message names its own.
type Sink struct {
	Agg *aggregator.Aggregator // nil: nothing to count (nor anything late)
	Thr *throttle.Set          // nil: no policies
	// Quiet marks a second reading of events that another sink reports:
	// its rejections are neither counted nor dead-lettered, and its
	// messages are not in the metrics.
	Quiet bool
	// Match, if set, says whether a decoded event belongs here: whether
	// the subject it came on names its room and user. One that does not
	// is rejected as subject_mismatch.
	Match func(m *Msg, ev *chat.Event) bool
	// OnCaughtUp, if set, is called, on the consumer's goroutine, once the
	// message marked CaughtUp has been handled.
	OnCaughtUp func()

	seq atomic.Uint64 // stream sequence of the newest message handled
}

// Seq is the stream sequence of the newest message the sink has handled
// (its throttle policies included).
func (s *Sink) Seq() uint64 { return s.seq.Load() }

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

// Consumer reads events from a Source into sinks.
type Consumer struct {
	cfg  Config
	sink *Sink // for messages that name none
	m    *metrics

	ready   atomic.Bool
	handled atomic.Uint64 // messages handled, of every kind
	done    chan struct{} // closed when the loop has handled everything

	// gate is held by the loop while it handles a batch, and by Pause;
	// inflight counts the batches handed to the throttle goroutine and
	// not finished yet.
	gate     sync.Mutex
	inflight atomic.Int32

	// scratch of handle, owned by the loop
	from []int
	late []int
}

// New returns a consumer that counts in sink what names no other; Start
// starts it.
func New(sink *Sink, reg prometheus.Registerer, cfg Config) *Consumer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Consumer{cfg: cfg, sink: sink, m: newMetrics(reg), done: make(chan struct{})}
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

// Pause runs fn while nothing changes the sinks: between two batches, once
// every message handled so far has gone through the throttle policies too.
// So what fn reads of the sinks (their state, and Seq) is the effect of
// exactly the messages up to some point of each source. Ingest waits
// meanwhile: keep fn short (copy, do not encode).
func (c *Consumer) Pause(fn func()) {
	c.gate.Lock()
	defer c.gate.Unlock()
	for c.inflight.Load() > 0 { // at most one batch's throttling away
		time.Sleep(50 * time.Microsecond)
	}
	fn()
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
			c.inflight.Add(-1)
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
	sink       *Sink
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
		s := c.sinkOf(&batch[start])
		end := start + 1
		for end < len(batch) && c.sinkOf(&batch[end]) == s {
			end++
		}
		c.handleRun(batch[start:end], s, nowMs, j)
		start = end
	}
}

func (c *Consumer) sinkOf(m *Msg) *Sink {
	if m.Sink != nil {
		return m.Sink
	}
	return c.sink
}

// handleRun handles messages for one sink.
func (c *Consumer) handleRun(msgs []Msg, s *Sink, nowMs int64, j *job) {
	skew := c.cfg.MaxSkew.Milliseconds()
	r := run{sink: s, start: len(j.evs)}
	c.from = c.from[:0]
	for i := range msgs {
		m := &msgs[i]
		r.caughtUp = r.caughtUp || m.CaughtUp
		r.seq = max(r.seq, m.Seq)
		if c.cfg.Own != "" && strings.HasPrefix(m.Subject, c.cfg.Own) {
			continue // never our own subjects, whatever the filter says
		}
		if !s.Quiet {
			j.received++
		}
		received := nowMs
		if m.Received != 0 {
			received = m.Received
		}
		ev, err := Decode(m.Data, received, skew)
		switch {
		case err != nil:
			c.reject(m, s, err.(*Error))
		case !ev.Counted:
			if !s.Quiet {
				j.ignored++
			}
		default:
			// Match is asked about the event where it is kept: a pointer
			// to ev handed to a func value would make ev escape, an
			// allocation for every message.
			j.evs = append(j.evs, ev.Event)
			if s.Match != nil && !s.Match(m, &j.evs[len(j.evs)-1]) {
				j.evs = j.evs[:len(j.evs)-1]
				c.reject(m, s, &Error{Reason: ReasonSubjectMismatch, Msg: fmt.Sprintf("subject %s does not name the event's room %q and user %q", m.Subject, clip(ev.Room), clip(ev.User))})
			} else {
				c.from = append(c.from, i)
			}
		}
	}
	// The run's events are counted where they are, in the job, and the
	// late ones (rare) taken out after, the others moving up in order.
	evs := j.evs[r.start:]
	c.late = c.late[:0]
	if s.Agg != nil {
		c.late = s.Agg.Observe(nowMs, evs, c.late)
	}
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
		if r.sink.Thr != nil {
			replay := j.replay[r.start:r.end]
			r.sink.Thr.ObserveBatch(evs, func(i int, a throttle.Alert) {
				if !replay[i] && c.cfg.OnAlert != nil { // a replayed event's alert went out when it was live
					c.cfg.OnAlert(a)
				}
			})
		}
		if !r.sink.Quiet {
			accepted += len(evs)
		}
		if r.seq != 0 {
			r.sink.seq.Store(r.seq)
		}
		if r.caughtUp {
			c.caughtUp(r.sink)
		}
	}
	c.m.received.Add(float64(j.received))
	c.m.ignored.Add(float64(j.ignored))
	c.m.accepted.Add(float64(accepted))
	c.handled.Add(uint64(j.messages))
	clear(j.evs) // let the payloads go
}

// caughtUp notes that a sink's replay has been handled.
func (c *Consumer) caughtUp(s *Sink) {
	if s.OnCaughtUp != nil {
		s.OnCaughtUp()
	}
	if s == c.sink && !c.ready.Load() {
		c.ready.Store(true)
		c.cfg.Log.Info("replay caught up")
	}
}

// reject counts a rejected message and hands it to OnReject, to be
// dead-lettered. Replayed messages were dead-lettered when they first
// arrived, and are not again; a quiet sink's are another sink's to report.
func (c *Consumer) reject(m *Msg, s *Sink, err *Error) {
	if s.Quiet {
		return
	}
	c.m.rejected[err.Reason].Inc()
	if !m.Replay && c.cfg.OnReject != nil {
		c.cfg.OnReject(m, err)
	}
}
