package group

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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/ingest"
)

// A filer files a foreign bus's events where a group can partition them
// (docs/contract.md section 13). Dendrite publishes every room's events
// on one subject, with room and user only in the payload, so the group's
// chat stream cannot file them by partition itself: the stream
// bus.SourceCopy(--stream) sources the foreign stream, and the filer
// reads that copy in order, decodes each event with --input and files it
// again on chat.<room>.<user> of the chat stream in chatpulse's own form
// (section 1: room, user, ts, type, id, text), where the partitions read
// it as any other event.
//
// One member at a time files: the filing is held under a lease of the
// group's bucket like a partition's, the key owner.<partitions> (one past
// the last partition), which rendezvous gives to one member and a
// takeover moves as it moves a partition. Neither a takeover nor a member
// that dies drops or doubles an event: each filed event carries the
// Nats-Msg-Id bus.FiledID(copy, its sequence there); after each batch is
// acknowledged, the filer writes the copy's sequence it has filed up to
// in the group's progress bucket (key filer), and whoever files next
// starts after it. What a holder filed after its last progress write
// (it died in between) the next finds in the chat stream by its
// Nats-Msg-Id, reading the stream back from its end (resume), and does
// not file again, however long the group was down: the chat stream's
// duplicate window (2 minutes by default) is only the second guard, for
// when that cannot be read.
//
// What does not decode is dead-lettered as a standalone instance would
// (too_large, malformed, invalid, unmapped, future; each read from the
// copy, so its dead letter is named by its sequence there), and what the
// format skips (a Matrix edit or redaction) is counted ignored; neither
// is filed.
type filer struct {
	bus      *bus.Bus
	format   *ingest.Format
	copy     string // the stream that sources the foreign one
	chat     string // the chat stream, where it files
	prefix   string // chat.: where events are filed
	skew     time.Duration
	grace    time.Duration // how long a batch under way may take once the filing stops: a lease tick
	progress *progress
	// skip: the copy's sequences that the chat stream holds already,
	// though the progress recorded did not say so (resume).
	skip     map[uint64]bool
	consumer *ingest.Consumer // counts what is not filed
	log      *slog.Logger
	// Events filed, and those of them the chat stream already had.
	filed, again prometheus.Counter
	// The dead letters of filed events (deadLetterFiled) under way, and
	// a place for each.
	originals sync.WaitGroup
	fetching  chan struct{}
	// The backlog of the filing on this member (backlog), by the copy's
	// sequences: the last it holds, as last seen, and the last filed (or
	// skipped). Both 0 while this member does not file.
	seen, done atomic.Uint64
}

// filing is the filer's run on this member, while it holds the lease.
type filing struct {
	rev    uint64 // the claim it runs by
	cancel context.CancelFunc
	done   chan struct{}
	// caughtUp: it has filed all that the copy held when it began, and
	// the lease says it is ready (as a partition that has replayed).
	caughtUp atomic.Bool
}

// newFiler is the filer of a member with --source-stream; Attach gives it
// its bus and the copy it reads.
func newFiler(cfg Config, consumer *ingest.Consumer, reg prometheus.Registerer) *filer {
	f := &filer{format: cfg.Input, chat: cfg.Stream, prefix: strings.TrimSuffix(cfg.Subject, ">"), skew: cfg.MaxSkew, grace: cfg.Lease / 4,
		consumer: consumer, log: cfg.Log,
		filed: prometheus.NewCounter(prometheus.CounterOpts{Name: "chatpulse_events_filed_total",
			Help: "Events of a foreign stream this member filed on chat.<room>.<user>, in a group with --source-stream."}),
		again: prometheus.NewCounter(prometheus.CounterOpts{Name: "chatpulse_events_filed_again_total",
			Help: "Events this member filed that the chat stream already had (a takeover of the filing), dropped as duplicates."}),
	}
	if f.format == nil {
		f.format = ingest.Native()
	}
	f.fetching = make(chan struct{}, originalsAtOnce)
	reg.MustRegister(f.filed, f.again)
	return f
}

// attachFiler makes the copy of the foreign stream, which the filer
// reads, beside the chat stream.
func (m *Member) attachFiler(ctx context.Context, stream bus.StreamConfig) error {
	sourcing := stream
	sourcing.Stream, sourcing.Subject, sourcing.Source = bus.SourceCopy(stream.Stream), ">", m.cfg.SourceStream
	if err := m.bus.EnsureStreams(ctx, sourcing, 0); err != nil {
		if errors.Is(err, bus.ErrNotSourced) {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		return err
	}
	m.filer.bus, m.filer.copy = m.bus, sourcing.Stream
	return nil
}

// startFiling files on a goroutine of its own until stopFiling.
func (m *Member) startFiling(rev uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &filing{rev: rev, cancel: cancel, done: make(chan struct{})}
	m.mu.Lock()
	m.filing = f
	m.mu.Unlock()
	m.log.Info("group: filing", "copy", m.filer.copy, "on", m.filer.prefix+">")
	p := m.cfg.Partitions
	caughtUp := func() {
		f.caughtUp.Store(true)
		m.leases.CaughtUp(p, rev)
	}
	go func() {
		defer close(f.done)
		m.filer.run(ctx, caughtUp)
	}()
}

// stopFiling stops the filing that runs by claim (the lease loop's and
// the validity timer's stop may both come): once it returns, this member
// files nothing more under it.
func (m *Member) stopFiling(claim uint64) {
	m.mu.Lock()
	f := m.filing
	if f == nil || f.rev != claim {
		m.mu.Unlock()
		return
	}
	m.filing = nil
	m.mu.Unlock()
	f.cancel()
	<-f.done
	m.filer.seen.Store(0)
	m.filer.done.Store(0)
	m.log.Info("group: filing stopped")
}

// backlog is how many messages of the copy this member's filing has yet
// to file (0: it does not file): part of its lag.
func (f *filer) backlog() uint64 {
	done, seen := f.done.Load(), f.seen.Load()
	return seen - min(done, seen)
}

// run files until ctx is done, starting again after an error, and calls
// caughtUp once it has filed what the copy held when it began.
func (f *filer) run(ctx context.Context, caughtUp func()) {
	caughtUp = sync.OnceFunc(caughtUp)
	for {
		err := f.file(ctx, caughtUp)
		if ctx.Err() != nil {
			return
		}
		f.log.Warn("group: filing interrupted; resuming", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// file reads the copy from where the filing stopped last, and files what
// it reads, a batch of what has arrived at a time, calling caughtUp once
// it has filed what the copy held when it began.
func (f *filer) file(ctx context.Context, caughtUp func()) error {
	from, first, last := f.resume(ctx)
	f.seen.Store(last)
	f.done.Store(max(from, first, 1) - 1)
	through := last // what must be filed to be caught up
	if f.done.Load() >= through {
		caughtUp()
	}
	src, err := f.bus.Read(ctx, f.copy, from)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, src.Stop)
	defer func() {
		if stop() { // ctx is not done: stop it here
			src.Stop()
		}
	}()
	batch := make([]ingest.Msg, 0, fileBatchMax)
	var out []*nats.Msg
	for {
		var more bool
		batch, more = src.Next(batch[:0])
		if err := ctx.Err(); err != nil {
			return err // stopped: no new batch
		}
		if len(batch) > 0 {
			seq := batch[len(batch)-1].Seq
			f.seen.Store(max(f.seen.Load(), seq+src.Pending()))
			out = f.encode(batch, out[:0])
			if err := f.fileBatch(ctx, out, seq); err != nil {
				return err
			}
			if f.done.Store(seq); seq >= through {
				caughtUp()
			}
		}
		if !more {
			return errors.New("the copy's consumer stopped")
		}
	}
}

// fileBatch files out, the events of the copy up to sequence last, again
// until the chat stream has them all, and records that it has. A batch
// under way when the filing stops is given f.grace to finish (its
// acknowledgements take a round trip) and be recorded, so that whoever
// files next files none of it again; the lease loop waits for a stop,
// so no longer than one of its ticks.
func (f *filer) fileBatch(ctx context.Context, out []*nats.Msg, last uint64) error {
	for {
		err := f.fileOnce(ctx, out, last)
		if err == nil || ctx.Err() != nil {
			return err
		}
		f.log.Warn("group: events not filed; filing them again", "events", len(out), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (f *filer) fileOnce(ctx context.Context, out []*nats.Msg, last uint64) error {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fileWait)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(f.grace, cancel) })
	defer stop()
	dups, err := f.bus.File(bctx, out)
	if err != nil {
		return err
	}
	f.filed.Add(float64(len(out) - dups))
	f.again.Add(float64(dups))
	if err := f.progress.putFiled(bctx, filed{Copy: f.copy, Seq: last}); err != nil {
		f.log.Warn("group: filing progress not recorded", "err", err)
	}
	return nil
}

// fileWait is how long a batch's acknowledgements may take;
// fileBatchMax, the most events a batch has.
const (
	fileWait     = 5 * time.Second
	fileBatchMax = 1024
)

// resume is the copy's first sequence not filed yet (0: the copy's
// first), and the copy's first and last sequences now (0 if they cannot
// be read: nothing to catch up), from the progress the last filer
// recorded. A filer that died after some of a batch was stored and
// before it recorded so left the record behind: what the chat stream
// holds from the copy past the record is set in f.skip, not to be filed
// again (once the chat stream's duplicate window is over, it would be
// stored twice).
func (f *filer) resume(ctx context.Context) (from, first, last uint64) {
	first, last, err := f.bus.Seqs(ctx, f.copy)
	if err != nil {
		first, last = 0, 0
	}
	var done uint64 // the last sequence recorded (0: none)
	if p, ok := f.progress.filed(ctx); ok && p.Copy == f.copy {
		done = p.Seq
	}
	if err == nil && last < done {
		f.log.Warn("group: the copy holds less than was filed from it (made again?): filing all it holds", "copy", f.copy, "filed", done, "last", last)
		done = 0
	}
	f.skip = nil
	switch skip, known, err := f.bus.FiledAfter(ctx, f.chat, f.copy, done, filedBack); {
	case err != nil || !known:
		f.log.Warn("group: what was filed after the progress recorded is not known: filing it again (the chat stream drops what it has within its duplicate window)", "recorded", done, "err", err)
	case len(skip) > 0:
		f.log.Info("group: the chat stream holds events filed after the progress recorded: not filing them again", "recorded", done, "events", len(skip))
		f.skip = skip
	}
	if done == 0 {
		return 0, first, last
	}
	return done + 1, first, last
}

// filedBack is how far back from the chat stream's end resume looks for
// what was filed after the progress recorded: a batch, and what others
// may have published there meanwhile.
const filedBack = 2 * fileBatchMax

// encode decodes a batch read from the copy, dead-letters or counts what
// it does not file, and appends to out what it files.
func (f *filer) encode(batch []ingest.Msg, out []*nats.Msg) []*nats.Msg {
	skew := f.skew.Milliseconds()
	limit := min(f.format.MaxPayload(), f.bus.MaxPayload()-1024) // the headers must fit too
	for i := range batch {
		m := &batch[i]
		if strings.HasPrefix(m.Subject, bus.OwnPrefix) {
			continue // never our own subjects, as ingest
		}
		if f.skip[m.Seq] {
			delete(f.skip, m.Seq) // filed by the filer before, which died before it said so
			continue
		}
		ev, err := f.format.Decode(m.Data, m.Received, skew)
		if err != nil {
			f.reject(m, err)
			continue
		}
		if !ev.Counted {
			f.consumer.Unfiled("")
			continue
		}
		msg := bus.FiledMsg(f.prefix, ev, bus.FiledID(f.copy, m.Seq))
		if len(msg.Data) > limit {
			f.reject(m, &ingest.Error{Reason: ingest.ReasonTooLarge, Msg: fmt.Sprintf("filed, the event is %d bytes, more than the limit of %d", len(msg.Data), limit)})
			continue
		}
		out = append(out, msg)
	}
	return out
}

// deadLetterFiled dead-letters, if m is an event the filer filed, the
// message of the copy it was filed from in its place, and reports
// whether it was one: a partition rejects a filed event (as late, the one
// reason a filed event can have that its original did not), and its dead
// letter must be the chat system's payload, not chatpulse's form of it,
// named by its sequence in the copy, as the filer's own dead letters
// are. Fetching it takes round trips, which ingest does not wait for: up
// to originalsAtOnce run on goroutines of their own, and past that ingest
// waits for one. If the copy no longer has it, the filed event is
// dead-lettered, with a log line.
func (f *filer) deadLetterFiled(m *ingest.Msg, err *ingest.Error) bool {
	seq, ok := bus.FiledFrom(f.copy, nats.Header(m.Header).Get(nats.MsgIdHdr))
	if !ok || f.bus == nil {
		return false
	}
	filed := *m
	f.originals.Add(1)
	f.fetching <- struct{}{}
	go func() {
		defer func() { <-f.fetching; f.originals.Done() }()
		ctx, cancel := context.WithTimeout(context.Background(), fileWait)
		defer cancel()
		orig, e := f.bus.Original(ctx, f.copy, seq)
		if e != nil {
			f.log.Warn("group: a filed event's original not found: dead-lettering the filed event", "copy", f.copy, "seq", seq, "err", e)
			f.bus.DeadLetter(&filed, err)
			return
		}
		f.bus.DeadLetter(&orig, err)
	}()
	return true
}

// originalsAtOnce is how many dead letters of filed events may be
// fetching their originals at once.
const originalsAtOnce = 64

func (f *filer) reject(m *ingest.Msg, err *ingest.Error) {
	f.consumer.Unfiled(err.Reason)
	f.bus.DeadLetter(m, err)
}
