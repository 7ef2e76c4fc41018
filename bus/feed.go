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

// A Feed is one ordered consumer of Feeds.
type Feed struct {
	cc      jetstream.ConsumeContext
	first   uint64        // the first stream sequence it could deliver
	pending atomic.Uint64 // messages of the filter not yet delivered, as of the last delivered
	last    atomic.Uint64 // stream sequence of the newest message delivered
	// calls is the number of callbacks running, plus halted once Halt
	// was called: what they deliver from then on is dropped. idle is
	// closed by the callback that leaves none running after Halt.
	calls    atomic.Int64
	idle     chan struct{}
	idleOnce sync.Once
}

// halted is the bit of Feed.calls that Halt sets.
const halted = 1 << 40

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
	feed = &Feed{first: info.Delivered.Stream + 1, idle: make(chan struct{})} // nothing delivered yet: the sequence before its start
	feed.pending.Store(info.NumPending)
	caughtUp = info.NumPending == 0
	done := caughtUp // owned by the callback from here on
	feed.cc, err = cons.Consume(func(m jetstream.Msg) {
		if !feed.enter() {
			return
		}
		defer feed.leave()
		in := ingest.Msg{Subject: Unfiled(m.Subject(), c.Subject), Data: m.Data(), Header: m.Headers(), Sink: c.Sink}
		if md, err := m.Metadata(); err == nil {
			in.Received = md.Timestamp.UnixMilli()
			in.Seq = md.Sequence.Stream
			in.Replay = in.Seq <= c.ReplayThrough
			in.CaughtUp = !done && md.NumPending == 0
			done = done || in.CaughtUp
			feed.pending.Store(md.NumPending)
			feed.last.Store(in.Seq)
		}
		fs.ch <- in
	}, jetstream.PullMaxMessages(jsBuffer), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		fs.b.log.Warn("jetstream consumer", "stream", c.Stream, "filter", c.Filter, "err", err)
	}))
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consume %s: %w", c.Stream, c.Filter, err)
	}
	return feed, caughtUp, nil
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
	f.cc.Stop()
	f.closed()
}

// Drain stops the feed once it has delivered what it fetched; it returns
// once it delivers no more.
func (f *Feed) Drain() {
	f.cc.Drain()
	if !f.closed() {
		f.cc.Stop()
	}
}

// closed waits, up to 5 s, for the feed to deliver no more.
func (f *Feed) closed() bool {
	select {
	case <-f.cc.Closed():
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
