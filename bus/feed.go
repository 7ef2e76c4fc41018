package bus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/ingest"
)

// FeedConfig says what one feed reads: the messages of one filter subject
// of a stream, from a sequence or a time, each marked for a sink.
type FeedConfig struct {
	Stream string
	Filter string
	// FromSeq is the first stream sequence to read; 0: from FromTime.
	FromSeq  uint64
	FromTime time.Time
	// Messages up to ReplayThrough were handled before, by an earlier
	// run or by whoever held the sink's partition: they are marked
	// Replay.
	ReplayThrough uint64
	Sink          ingest.Sink
	// Subject is the events' subject filter (chat.>): a message the
	// stream filed by partition is delivered under the subject it was
	// published on, rebuilt from it.
	Subject string
}

// Feeds are ordered consumers, one per feed (one filter subject each,
// started by sequence or time), that all deliver into one channel, read as
// one Source: a standalone instance has one feed, a group member one per
// stage of each partition it holds, and one pipeline for all of them.
type Feeds struct {
	b   *Bus
	ch  chan ingest.Msg
	src *Source
}

// A Feed is one filter of a stream read in order by Feeds: an ordered
// consumer at a time. Its watch replaces a consumer in trouble that
// delivers nothing, from the message after the last it delivered.
type Feed struct {
	fs      *Feeds
	cfg     FeedConfig
	first   uint64        // the first stream sequence it could deliver
	pending atomic.Uint64 // messages of the filter not yet delivered, as of the last delivered
	last    atomic.Uint64 // stream sequence of the newest message delivered
	// calls is the number of callbacks running, plus halted once Halt
	// was called: what they deliver from then on is dropped. idle is
	// closed by the callback that leaves none running after Halt.
	calls    atomic.Int64
	idle     chan struct{}
	idleOnce sync.Once

	// mu is held by the callback delivering a message, and to replace
	// the consumer: messages of a consumer replaced (not of gen) are
	// dropped, so one consumer's messages at a time reach Feeds, in
	// order, each once.
	mu       sync.Mutex
	gen      atomic.Int64 // written under mu
	cc       jetstream.ConsumeContext
	caughtUp bool // a message marked CaughtUp was delivered, or none was pending at the start
	// trouble: the consumer reported an error, or the connection was
	// lost, and it delivered nothing since.
	trouble atomic.Bool

	quit    context.CancelFunc // ends watch
	watched chan struct{}      // closed when watch returns
}

// halted is the bit of Feed.calls that Halt sets.
const halted = 1 << 40

// feedCheck is how often a feed's watch looks whether it is stalled.
var feedCheck = 5 * time.Second

// NewFeeds returns an empty set of feeds.
func (b *Bus) NewFeeds() *Feeds {
	fs := &Feeds{b: b, ch: make(chan ingest.Msg, jsBuffer)}
	fs.src = NewSource(fs.ch, func() {})
	return fs
}

// Source is what every feed delivers, for ingest.
func (fs *Feeds) Source() *Source { return fs.src }

// Start starts a feed. caughtUp says there was nothing to read when it
// started; otherwise the message that finds nothing more pending is
// marked CaughtUp.
func (fs *Feeds) Start(ctx context.Context, c FeedConfig) (feed *Feed, caughtUp bool, err error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{c.Filter}}
	if c.FromSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, c.FromSeq
	} else {
		from := c.FromTime
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	}
	cons, err := fs.b.js.OrderedConsumer(ctx, c.Stream, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consumer of %s: %w", c.Stream, c.Filter, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consumer of %s: %w", c.Stream, c.Filter, err)
	}
	feed = &Feed{fs: fs, cfg: c, first: info.Delivered.Stream + 1, idle: make(chan struct{}), watched: make(chan struct{})} // nothing delivered yet: the sequence before its start
	feed.pending.Store(info.NumPending)
	caughtUp = info.NumPending == 0
	feed.caughtUp = caughtUp
	if err := feed.consume(cons); err != nil {
		return nil, false, err
	}
	var wctx context.Context
	wctx, feed.quit = context.WithCancel(context.Background())
	go feed.watch(wctx)
	return feed, caughtUp, nil
}

// consume has cons deliver the feed's messages from now on, in place of
// the consumer before it (which it stops).
func (f *Feed) consume(cons jetstream.Consumer) error {
	c := f.cfg
	f.mu.Lock()
	defer f.mu.Unlock()
	gen := f.gen.Add(1)
	cc, err := cons.Consume(func(m jetstream.Msg) { f.deliver(gen, m) },
		jetstream.PullMaxMessages(jsBuffer), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			f.fs.b.log.Warn("jetstream consumer", "stream", c.Stream, "filter", c.Filter, "err", err)
			if f.gen.Load() == gen {
				f.trouble.Store(true)
			}
		}))
	if err != nil {
		return fmt.Errorf("stream %s: consume %s: %w", c.Stream, c.Filter, err)
	}
	if f.cc != nil {
		go f.cc.Stop()
	}
	f.cc = cc
	return nil
}

// deliver hands m, of the consumer of generation gen, to Feeds.
func (f *Feed) deliver(gen int64, m jetstream.Msg) {
	if !f.enter() {
		return
	}
	defer f.leave()
	f.mu.Lock()
	defer f.mu.Unlock()
	md, err := m.Metadata()
	if gen != f.gen.Load() || err == nil && md.Sequence.Stream <= f.last.Load() {
		return // a consumer replaced, or a message it delivered already
	}
	if f.trouble.Load() {
		f.trouble.Store(false)
	}
	c := f.cfg
	in := ingest.Msg{Subject: Unfiled(m.Subject(), c.Subject), Data: m.Data(), Header: m.Headers(), Sink: c.Sink}
	if err == nil {
		in.Received = md.Timestamp.UnixMilli()
		in.Seq = md.Sequence.Stream
		in.Replay = in.Seq <= c.ReplayThrough
		in.CaughtUp = !f.caughtUp && md.NumPending == 0
		f.caughtUp = f.caughtUp || in.CaughtUp
		f.pending.Store(md.NumPending)
		f.last.Store(in.Seq)
	}
	f.fs.ch <- in
}

// watch replaces the feed's consumer when it is in trouble and delivers
// nothing for a whole feedCheck, until ctx ends.
//
// An ordered consumer recreates itself on the server when it misses
// heartbeats or its connection comes back, under the same name at each
// try. After a NATS node is lost, one whose recreation is placed on that
// node is never answered, and it tries again forever (nats.go v1.55.0):
// its filter's messages would wait for the node to come back. A consumer
// under a new name is placed again.
//
// Whether the stream holds messages the consumer did not deliver is not
// asked: for a filter with wildcards the server walks every subject that
// matches (half a second for a million subjects). So a consumer in
// trouble is replaced even when it had nothing to deliver: once an
// episode, as the new one starts out of trouble.
func (f *Feed) watch(ctx context.Context) {
	defer close(f.watched)
	t := time.NewTicker(feedCheck)
	defer t.Stop()
	seen, lost := f.last.Load(), f.fs.b.lost.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l := f.fs.b.lost.Load(); l != lost {
			lost = l
			f.trouble.Store(true) // its recreation on reconnecting is not reported
		}
		last := f.last.Load()
		if last != seen || !f.trouble.Load() || f.calls.Load() != 0 {
			seen = last // it moved, is fine, is delivering (Feeds' reader may be slow), or is halted
			continue
		}
		from := max(f.first, last+1)
		f.fs.b.log.Warn("jetstream consumer in trouble and silent: starting another", "stream", f.cfg.Stream, "filter", f.cfg.Filter, "from", from)
		cons, err := f.fs.b.js.OrderedConsumer(ctx, f.cfg.Stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{f.cfg.Filter}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
		if err == nil {
			err = f.consume(cons)
		}
		if err != nil {
			f.fs.b.log.Warn("jetstream consumer not replaced; trying again", "stream", f.cfg.Stream, "filter", f.cfg.Filter, "err", err)
			continue
		}
		f.trouble.Store(false)
		f.fs.b.replaced.Add(1)
	}
}

// Pending is how many messages of the feed's filter the stream held that
// it had not delivered yet, when it last delivered one.
func (f *Feed) Pending() uint64 { return f.pending.Load() }

// First is the first stream sequence the feed could deliver: every
// message of its filter before it was before where it started.
func (f *Feed) First() uint64 { return f.first }

// Last is the stream sequence of the newest message it delivered (0:
// none yet).
func (f *Feed) Last() uint64 { return f.last.Load() }

// Halt makes the feed deliver nothing more, at once: it drops what it
// fetched and did not deliver, and returns once no message is on its way
// (which takes no round trip: Stop, after, ends its consumer).
//
// One word holds both the halt and the count of callbacks running. A
// callback counts itself in and learns whether the feed is halted in one
// atomic add; Halt sets the bit and learns how many run in one atomic
// or. So every callback either saw the halt and drops its message, or
// was counted when Halt set it. If none was running, Halt returns at
// once (so does a Feed that never started). Otherwise the count reaches
// 0 after the or, and the callback that brings it there closes idle: no
// wake-up is lost, as a closed channel stays closed. A callback pays one
// atomic add coming in and one going out, where it paid two and a load.
func (f *Feed) Halt() {
	if f.calls.Or(halted)&^halted == 0 {
		return
	}
	<-f.idle
}

// enter counts a callback in. False: the feed is halted, and the
// callback, counted out again, must deliver nothing.
func (f *Feed) enter() bool {
	if f.calls.Add(1)&halted == 0 {
		return true
	}
	f.leave()
	return false
}

// leave counts a callback out. The last one out after Halt closes idle.
func (f *Feed) leave() {
	if f.calls.Add(-1) == halted {
		f.idleOnce.Do(func() { close(f.idle) })
	}
}

// Stop halts the feed and ends its consumer; it returns once the consumer
// is closed, or after 5 s.
func (f *Feed) Stop() {
	f.Halt()
	cc := f.unwatch()
	cc.Stop()
	closed(cc)
}

// Drain stops the feed once it has delivered what it fetched; it returns
// once it delivers no more.
func (f *Feed) Drain() {
	cc := f.unwatch()
	cc.Drain()
	if !closed(cc) {
		cc.Stop()
	}
}

// unwatch ends the watch, and returns the consumer it leaves: the last.
func (f *Feed) unwatch() jetstream.ConsumeContext {
	f.quit()
	<-f.watched
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cc
}

// closed waits, up to 5 s, for cc to deliver no more.
func closed(cc jetstream.ConsumeContext) bool {
	select {
	case <-cc.Closed():
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// LastSeq is the stream's newest sequence.
func (b *Bus) LastSeq(ctx context.Context, stream string) (uint64, error) {
	_, last, err := b.Seqs(ctx, stream)
	return last, err
}

// Seqs are the stream's oldest and newest sequences: what it holds.
func (b *Bus) Seqs(ctx context.Context, stream string) (first, last uint64, err error) {
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	st := s.CachedInfo().State
	return st.FirstSeq, st.LastSeq, nil
}
