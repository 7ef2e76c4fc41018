// Package standalone is chatpulse's engine when it runs alone (contract
// sections 1-7 and 9): one stage, an aggregator and the throttle policies,
// fed every event of the chat stream by one consumer, and answering every
// view and check from it.
//
// With JetStream it reads the stream from its snapshot's sequence, or one
// largest window back, and is ready once it has caught up; without, a core
// NATS subscription from now on, ready at once.
package standalone

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
)

// stageName is the name of the one stage in a standalone snapshot.
const stageName = "standalone"

// Engine is a standalone instance's engine (an engine.Engine).
type Engine struct {
	*aggregator.Aggregator // the views
	*throttle.Set          // the checks

	cfg      engine.Config
	reg      prometheus.Registerer
	stage    *engine.Stage
	consumer *ingest.Consumer
	keeper   *engine.Keeper // nil: no snapshots
	// local and pre: the directory of the snapshot's local copy, and
	// that copy loading meanwhile (Preload); "" and nil: none.
	local string
	pre   *engine.Preload

	bus  *bus.Bus
	src  *bus.Source
	feed *bus.Feed // nil: core NATS
	// nothing is what the source began with: nothing to replay, ready
	// once Run starts counting.
	nothing bool
	alerts  func(throttle.Alert)
	cancel  context.CancelFunc
	done    chan struct{} // closed when the snapshot loop has stopped
}

var _ engine.Engine = (*Engine)(nil)

// New makes the engine; nothing touches the network until Attach.
func New(cfg engine.Config, reg prometheus.Registerer) (*Engine, error) {
	cfg.Defaults()
	agg, err := aggregator.New(cfg.Windows)
	if err != nil {
		return nil, err
	}
	thr, err := throttle.NewSet(cfg.Policies)
	if err != nil {
		return nil, err
	}
	thr.Moderate(cfg.Book)
	e := &Engine{Aggregator: agg, Set: thr, cfg: cfg, reg: reg, done: make(chan struct{})}
	e.stage = &engine.Stage{Name: stageName, Agg: agg, Thr: thr, OnCaughtUp: func() { cfg.Log.Info("replay caught up") }}
	if cfg.OnOver != nil {
		e.stage.OnOver = func(o throttle.Over) { cfg.OnOver("", o) }
	}
	e.consumer = ingest.New(reg, ingest.Config{
		Format: cfg.Input, Own: bus.OwnPrefix, MaxSkew: cfg.MaxSkew, Now: cfg.Now, Log: cfg.Log,
		OnReject: func(m *ingest.Msg, err *ingest.Error) { e.bus.DeadLetter(m, err) },
		OnAlert:  e.alert,
	})
	return e, nil
}

// SnapshotName is the object an instance keeps its state under: one per
// stream and instance name.
func SnapshotName(stream, instance string) string { return "standalone." + stream + "." + instance }

func (e *Engine) job() engine.Job {
	return engine.Job{Name: SnapshotName(e.cfg.Stream, e.cfg.Instance), Stages: []*engine.Stage{e.stage}}
}

// Preload starts loading the local copy of the instance's newest
// snapshot, kept in dir beside the embedded NATS server's store, while
// the server recovers (engine/local.go); Attach keeps the copy's state
// only if the snapshot store holds that very snapshot and the stream
// agrees. Every snapshot saved from then on is copied to dir too. Call
// it before Attach, with JetStream and snapshots on.
func (e *Engine) Preload(dir string) {
	if e.cfg.SnapshotInterval == 0 {
		return
	}
	e.local = dir
	e.pre = engine.StartPreload(dir, e.job(), e.config(), e.cfg.Stream)
}

// config is what the state is taken under: windows and policies.
func (e *Engine) config() string { return engine.ConfigOf(e.cfg.Windows, e.Set.Policies(), 0) }

// Attach subscribes to the events, or with JetStream makes the streams,
// loads the snapshot and starts reading the stream from where it leaves
// off (one largest window back without one).
func (e *Engine) Attach(ctx context.Context, b *bus.Bus, _ string) error {
	e.bus = b
	c := &e.cfg
	if !c.JetStream {
		src, err := b.Subscribe(c.Subject, e.stage)
		if err != nil {
			return err
		}
		e.src, e.nothing = src, true
		return nil
	}
	sc := c.StreamConfig()
	if err := b.EnsureStreams(ctx, sc, 0); err != nil {
		return err
	}
	fromSeq, err := e.restore(ctx)
	if err != nil {
		return err
	}
	// What the stream holds now was handled by an earlier run, as far as
	// anyone knows: it raises no alerts or dead letters again.
	last, err := b.LastSeq(ctx, c.Stream)
	if err != nil {
		return err
	}
	feeds := b.NewFeeds()
	feed, caughtUp, err := feeds.Start(ctx, bus.FeedConfig{
		Stream: c.Stream, Filter: c.Subject, FromSeq: fromSeq, FromTime: c.ReplayFrom(), ReplayThrough: last, Sink: e.stage,
	})
	if err != nil {
		return err
	}
	if fromSeq > 0 {
		c.Log.Info("replaying", "stream", c.Stream, "from_sequence", fromSeq, "messages", feed.Pending())
	} else {
		c.Log.Info("replaying", "stream", c.Stream, "from", c.ReplayFrom().UTC().Format(time.RFC3339), "messages", feed.Pending())
	}
	e.src, e.feed, e.nothing = feeds.Source(), feed, caughtUp
	return nil
}

// restore loads the instance's snapshot, if there is a usable one, and
// returns the first stream sequence it does not cover (0: read from one
// largest window back, as without one).
func (e *Engine) restore(ctx context.Context) (uint64, error) {
	if e.cfg.SnapshotInterval == 0 {
		return 0, nil
	}
	store, err := e.bus.Snapshots(ctx, e.cfg.Replicas)
	if err != nil {
		return 0, err
	}
	e.keeper = engine.NewKeeper(store, e.config(), e.cfg.Stream, e.reg, e.cfg.Log)
	if e.local != "" {
		e.keeper.KeepLocal(e.local, e.pre)
	}
	first, last, err := e.bus.Seqs(ctx, e.cfg.Stream)
	if err != nil {
		return 0, err
	}
	return e.keeper.Restore(ctx, e.job(), first, last)[stageName], nil
}

// Run starts counting, and saving snapshots.
func (e *Engine) Run(alerts func(throttle.Alert)) error {
	if e.src == nil {
		return errors.New("standalone: Run before Attach")
	}
	e.alerts = alerts
	if e.nothing {
		e.stage.MarkCaughtUp()
	}
	e.consumer.Start(e.src)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		if e.keeper != nil {
			e.keeper.Run(ctx, e.cfg.SnapshotInterval, e.consumer.Pause, func() []engine.Job { return []engine.Job{e.job()} })
		}
	}()
	return nil
}

// Active lists the moderators' actions in force, then the keys over an
// enforcing policy.
func (e *Engine) Active(now int64) []throttle.Active {
	return append(throttle.ActionsActive(e.cfg.Book, now), e.Set.Active(now)...)
}

// Check is a read-only throttle check.
func (e *Engine) Check(now int64, q throttle.Query) throttle.Result { return e.Set.Decide(now, q) }

// Consume is a consuming check, of a message or of a join (q.Kind):
// decided and, if allowed, counted at once (docs/contract.md sections 10
// and 14); the alert of a crossing goes out as an event's does.
func (e *Engine) Consume(now int64, q throttle.Query, id string) throttle.Result {
	res, _, alerts := e.Set.Consume(now, q, id)
	for _, a := range alerts {
		e.alert(a)
	}
	return res
}

// alert publishes a throttle alert on NATS and hands it to the dashboards.
func (e *Engine) alert(a throttle.Alert) {
	e.bus.Alert(a)
	if e.alerts != nil {
		e.alerts(a)
	}
	if e.cfg.Log.Enabled(context.Background(), slog.LevelDebug) { // the arguments alone cost allocations
		e.cfg.Log.Debug("throttle alert", "policy", a.Policy, "room", a.Room, "user", a.User, "count", a.Count, "limit", a.Limit)
	}
}

// Handled is the number of messages handled so far, counted or not.
func (e *Engine) Handled() uint64 { return e.consumer.Handled() }

// Ready reports whether the replay has caught up.
func (e *Engine) Ready() bool { return e.stage.CaughtUp() }

// Reconfigure makes policies the throttle set's (nothing changes if they
// are not valid), while ingest waits, as a snapshot is taken: so a
// snapshot holds the state of the policies it is labelled with.
func (e *Engine) Reconfigure(policies []throttle.Policy) error {
	e.pre.Wait() // the stages are the preload's until it is over
	return e.keeper.Reconfigure(e.consumer.Pause, func() (string, error) {
		if err := e.Set.Reconfigure(policies); err != nil {
			return "", err
		}
		return e.config(), nil
	})
}

// Sweep brings the aggregator up to now and forgets the throttle keys at
// rest.
func (e *Engine) Sweep(now int64) {
	e.Aggregator.Advance(now)
	e.Set.Sweep(now)
}

// ThrottleStats are the throttle set's.
func (e *Engine) ThrottleStats() []throttle.PolicyStats { return e.Set.Stats() }

// Stats are the aggregator's.
func (e *Engine) Stats() aggregator.Stats { return e.Aggregator.Stats() }

// Settle has nothing to wait for: the instance's one book is the one its
// moderators write.
func (e *Engine) Settle(context.Context, uint64) error { return nil }

// Status is nil: no group.
func (e *Engine) Status() any { return nil }

// Close stops reading, counts what was delivered, and saves the state one
// last time, so that the next start replays nothing it had.
func (e *Engine) Close(ctx context.Context) error {
	if e.cancel == nil { // never ran
		if e.src != nil {
			e.stopReading()
		}
		return nil
	}
	e.cancel()
	<-e.done
	e.stopReading()
	if err := e.consumer.Wait(ctx); err != nil {
		return err
	}
	if e.keeper != nil && e.stage.Seq() != 0 {
		nothingRuns := func(f func()) { f() } // the consumer has stopped
		if _, err := e.keeper.Save(ctx, e.job(), nothingRuns); err != nil {
			e.cfg.Log.Warn("last snapshot not saved", "err", err)
		}
	}
	return nil
}

func (e *Engine) stopReading() {
	if e.feed != nil {
		e.feed.Drain()
	}
	e.src.Stop()
}
