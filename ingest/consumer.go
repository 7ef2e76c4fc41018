package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/throttle"
)

// Subjects and streams of chatpulse's own.
const (
	OwnPrefix          = "chatpulse."
	DeadLetterPrefix   = "chatpulse.deadletter."
	DeadLetterStream   = "CHATPULSE_DEADLETTER"
	DeadLetterMaxAge   = 7 * 24 * time.Hour
	ErrorHeader        = "Chatpulse-Error"
	SubjectHeader      = "Chatpulse-Subject" // the subject a dead letter was first published on
	batchSize          = 1024
	coreBuffer         = 1 << 18 // messages the core subscription may hold before the client drops
	streamMaxAgeMargin = 10 * time.Minute
)

// Config says where events come from.
type Config struct {
	Subject   string // subject filter, e.g. chat.>
	JetStream bool
	Stream    string        // with JetStream: the stream to read (created if missing)
	Replay    time.Duration // with JetStream: how far back to read at start: the largest window
	MaxSkew   time.Duration // ts further ahead of the wall clock than this is rejected as future
	Now       func() time.Time
	Log       *slog.Logger
	// OnAlert is called, on the consumer's goroutine, for each alert of a
	// live (not replayed) message.
	OnAlert func(throttle.Alert)
}

// Consumer reads events from NATS into the aggregator and the throttle set.
type Consumer struct {
	cfg Config
	nc  *nats.Conn
	agg *aggregator.Aggregator
	thr *throttle.Set
	m   *metrics

	ready    atomic.Bool
	handled  atomic.Uint64 // messages handled, of every kind
	stopping chan struct{} // closed once NATS delivers no more
	done     chan struct{} // closed when the loop has handled everything
	stop     func()        // stops delivery, waiting for what is buffered

	mu          sync.Mutex // guards lastDropped and lastDropLog
	lastDropped int
	lastDropLog time.Time

	// scratch of handle, owned by the loop
	evs     []chat.Event
	decoded []Event
	from    []int
	late    []int
}

// inMsg is a message as the loop sees it, whatever delivered it.
type inMsg struct {
	subject  string
	data     []byte
	header   nats.Header
	received int64 // Unix ms it reached NATS, if known (JetStream), else 0
	replay   bool  // read while catching up: no alerts, no dead letters
	caughtUp bool  // the last message of the replay
}

// New returns a consumer; Start starts it.
func New(nc *nats.Conn, agg *aggregator.Aggregator, thr *throttle.Set, reg prometheus.Registerer, cfg Config) *Consumer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Consumer{cfg: cfg, nc: nc, agg: agg, thr: thr, m: newMetrics(reg),
		stopping: make(chan struct{}), done: make(chan struct{})}
}

// Ready reports whether the consumer has caught up with the stream (always,
// once started, without JetStream).
func (c *Consumer) Ready() bool { return c.ready.Load() }

// Handled is the number of messages handled so far, counted or not.
func (c *Consumer) Handled() uint64 { return c.handled.Load() }

// Start subscribes and starts the loop that handles messages.
func (c *Consumer) Start(ctx context.Context) error {
	if c.cfg.JetStream {
		return c.startJetStream(ctx)
	}
	return c.startCore()
}

func (c *Consumer) startCore() error {
	ch := make(chan *nats.Msg, coreBuffer)
	sub, err := c.nc.ChanSubscribe(c.cfg.Subject, ch)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", c.cfg.Subject, err)
	}
	if err := c.nc.Flush(); err != nil { // the server has the subscription before we say ready
		return fmt.Errorf("subscribe %s: %w", c.cfg.Subject, err)
	}
	c.stop = func() {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			c.cfg.Log.Warn("drain subscription", "err", err)
		}
		for deadline := time.Now().Add(5 * time.Second); sub.IsValid() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	c.ready.Store(true)
	go loop(c, ch, func(m *nats.Msg) inMsg { return inMsg{subject: m.Subject, data: m.Data, header: m.Header} })
	return nil
}

func (c *Consumer) startJetStream(ctx context.Context) error {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return err
	}
	if err := EnsureStreams(ctx, js, c.cfg.Stream, c.cfg.Subject, c.cfg.Replay+c.cfg.MaxSkew+streamMaxAgeMargin, c.cfg.Log); err != nil {
		return err
	}
	// Start one largest window (plus the skew a ts may have over its
	// publish time) before now: everything any window can still hold.
	start := c.cfg.Now().Add(-c.cfg.Replay - c.cfg.MaxSkew)
	cons, err := js.OrderedConsumer(ctx, c.cfg.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.cfg.Subject}, // one filter: see the note on DeliverByStartTime in the README
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return fmt.Errorf("stream %s: consumer: %w", c.cfg.Stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: consumer info: %w", c.cfg.Stream, err)
	}
	if info.NumPending == 0 {
		c.ready.Store(true)
	}
	c.cfg.Log.Info("replaying", "stream", c.cfg.Stream, "from", start.UTC().Format(time.RFC3339), "messages", info.NumPending)
	ch := make(chan inMsg, batchSize*4)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		in := inMsg{subject: m.Subject(), data: m.Data(), header: m.Headers()}
		md, err := m.Metadata()
		if err == nil {
			// An event without ts gets the time the stream took it, the
			// same on a replay as when it was live.
			in.received = md.Timestamp.UnixMilli()
		}
		if !c.ready.Load() {
			in.replay = true
			in.caughtUp = err == nil && md.NumPending == 0
		}
		ch <- in
	}, jetstream.PullMaxMessages(batchSize*4), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		c.cfg.Log.Warn("jetstream consumer", "stream", c.cfg.Stream, "err", err)
	}))
	if err != nil {
		return fmt.Errorf("stream %s: consume: %w", c.cfg.Stream, err)
	}
	c.stop = func() {
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
			cc.Stop()
		}
	}
	go loop(c, ch, func(m inMsg) inMsg { return m })
	return nil
}

// Stop stops delivery and returns once every message delivered so far has
// been handled, or ctx is done.
func (c *Consumer) Stop(ctx context.Context) error {
	if c.stop == nil {
		return nil
	}
	c.stop()
	close(c.stopping)
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop handles messages in batches of what has arrived, up to batchSize,
// until delivery has stopped and the channel is empty. It decodes, counts
// and dead-letters; the throttle policies are fed on a second goroutine, so
// the two run side by side, one batch apart.
func loop[M any](c *Consumer, ch <-chan M, conv func(M) inMsg) {
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
	defer func() {
		close(work)
		<-throttled
		close(c.done)
	}()
	batch := make([]inMsg, 0, batchSize)
	handle := func() {
		if len(batch) > 0 {
			j := <-free // waits while the throttle goroutine is two batches behind
			c.handle(batch, j)
			work <- j
		}
		batch = batch[:0]
	}
	for {
		select {
		case m := <-ch:
			batch = append(batch, conv(m))
		case <-c.stopping:
			for { // delivery has stopped: finish what is buffered
				select {
				case m := <-ch:
					batch = append(batch, conv(m))
					if len(batch) == batchSize {
						handle()
					}
				default:
					handle()
					return
				}
			}
		}
	more:
		for len(batch) < batchSize {
			select {
			case m := <-ch:
				batch = append(batch, conv(m))
			default:
				break more
			}
		}
		handle()
	}
}

// job is a batch's work for the throttle goroutine: the events the
// aggregator counted, and the batch's numbers, reported once it is done.
type job struct {
	evs                         []Event
	replay                      []bool
	messages, received, ignored int
	caughtUp                    bool
}

// handle decodes a batch, counts what is good, dead-letters the rest, and
// fills j with what the throttle policies must see.
func (c *Consumer) handle(batch []inMsg, j *job) {
	now := c.cfg.Now()
	nowMs := now.UnixMilli()
	skew := c.cfg.MaxSkew.Milliseconds()
	c.evs, c.decoded, c.from = c.evs[:0], c.decoded[:0], c.from[:0]
	*j = job{evs: j.evs[:0], replay: j.replay[:0], messages: len(batch)}
	for i := range batch {
		m := &batch[i]
		j.caughtUp = j.caughtUp || m.caughtUp
		if strings.HasPrefix(m.subject, OwnPrefix) {
			continue // never our own subjects, whatever the filter says
		}
		j.received++
		received := nowMs
		if m.received != 0 {
			received = m.received
		}
		ev, err := Decode(m.data, received, skew)
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
		j.evs = append(j.evs, *ev)
		j.replay = append(j.replay, m.replay)
	}
}

// throttle feeds a job's events to the policies, then reports the batch.
// Until then the batch does not show in the metrics or in Handled, so that
// whoever waits for a message to be received sees its throttle state too.
func (c *Consumer) throttle(j *job) {
	// In pieces of a stack array, so that nothing is allocated per batch.
	var hits [64]throttle.Hit
	for start := 0; start < len(j.evs); start += len(hits) {
		part := hits[:min(len(hits), len(j.evs)-start)]
		for k := range part {
			ev := &j.evs[start+k]
			part[k] = throttle.Hit{At: time.UnixMilli(ev.TS), Room: ev.Room, User: ev.User, Text: ev.Text, Replay: j.replay[start+k]}
		}
		c.thr.ObserveBatch(part, c.cfg.OnAlert)
	}
	c.m.received.Add(float64(j.received))
	c.m.ignored.Add(float64(j.ignored))
	c.m.accepted.Add(float64(len(j.evs)))
	c.handled.Add(uint64(j.messages))
	if j.caughtUp && !c.ready.Load() {
		c.ready.Store(true)
		c.cfg.Log.Info("replay caught up", "stream", c.cfg.Stream)
	}
	clear(j.evs) // let the payloads go
}

// reject counts a rejected message and republishes it, unchanged, to
// chatpulse.deadletter.<reason> with the reason in a header. Replayed
// messages were dead-lettered when they first arrived, and are not again.
func (c *Consumer) reject(m *inMsg, err *Error) {
	c.m.rejected[err.Reason].Inc()
	if m.replay {
		return
	}
	h := nats.Header{}
	for k, v := range m.header {
		h[k] = v
	}
	h.Set(ErrorHeader, err.Msg)
	h.Set(SubjectHeader, m.subject)
	dl := &nats.Msg{Subject: DeadLetterPrefix + string(err.Reason), Data: m.data, Header: h}
	if perr := c.nc.PublishMsg(dl); perr != nil {
		c.cfg.Log.Warn("dead letter not published", "reason", err.Reason, "err", perr)
	}
}

// SlowConsumer is for the connection's error handler: it counts what the
// NATS client dropped for sub and logs it, at most every 10 seconds.
func (c *Consumer) SlowConsumer(sub *nats.Subscription) {
	n, err := sub.Dropped()
	if err != nil {
		return
	}
	c.mu.Lock()
	delta := n - c.lastDropped
	c.lastDropped = n
	logNow := time.Since(c.lastDropLog) > 10*time.Second
	if logNow {
		c.lastDropLog = time.Now()
	}
	c.mu.Unlock()
	if delta > 0 {
		c.m.dropped.Add(float64(delta))
	}
	if logNow {
		c.cfg.Log.Warn("slow consumer: NATS dropped messages because chatpulse fell behind", "subject", sub.Subject, "dropped_total", n)
	}
}

// EnsureStreams creates the chat stream (subjects = subject, at least
// maxAge of history, file storage) and the dead-letter stream if they are
// missing. An existing chat stream is used as it is; one that keeps less
// than maxAge is reported.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, stream, subject string, maxAge time.Duration, log *slog.Logger) error {
	s, err := js.Stream(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if overlapsOwn(subject) {
			return fmt.Errorf("stream %s: subject %q would also capture chatpulse's own chatpulse.> subjects; use a narrower one such as chat.>", stream, subject)
		}
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: stream, Subjects: []string{subject}, MaxAge: maxAge,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld,
		})
		if err != nil {
			return fmt.Errorf("create stream %s: %w", stream, err)
		}
		log.Info("created stream", "stream", stream, "subject", subject, "max_age", maxAge)
	case err != nil:
		return fmt.Errorf("stream %s: %w", stream, err)
	default:
		if age := s.CachedInfo().Config.MaxAge; age != 0 && age < maxAge {
			log.Warn("stream keeps less history than the largest window: a restart cannot rebuild it fully",
				"stream", stream, "max_age", age, "needed", maxAge)
		}
	}
	_, err = js.Stream(ctx, DeadLetterStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: DeadLetterStream, Subjects: []string{DeadLetterPrefix + ">"}, MaxAge: DeadLetterMaxAge,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld,
		})
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	return nil
}

// overlapsOwn reports whether a subject filter matches some chatpulse.>
// subject.
func overlapsOwn(subject string) bool {
	first, _, _ := strings.Cut(subject, ".")
	return first == ">" || first == "*" || first == "chatpulse"
}
