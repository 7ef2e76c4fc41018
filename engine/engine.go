package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/moderation"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// An Engine counts the chat events of one instance's share of the work and
// answers every view and check for all of it. cmd/chatpulse builds one
// (standalone.New, or group.New with --group) and runs it; nothing else in
// chatpulse depends on which it is.
//
// The life of an engine: built (nothing touches the network), Attach (the
// streams, buckets and snapshots it needs; nothing counted or answered
// yet), Run (counting, and in a group answering the others), Close.
// Reconfigure may come at any time after it is built.
type Engine interface {
	// The views of docs/contract.md section 3 (web.Views).
	Windows() aggregator.Windows
	WindowNames() []string
	Overview(win string, k int, now int64) (aggregator.Overview, error)
	Rooms(win string, limit int, now int64) (aggregator.Rooms, error)
	Room(name, win string, k int, now int64) (aggregator.Room, error)
	User(name, win string, now int64) (aggregator.User, error)
	// The throttle of docs/contract.md sections 5 and 10 (web.Throttle):
	// a consuming check (of a message, or of a join: q.Kind) publishes
	// the alerts it raises.
	Check(now int64, q throttle.Query) throttle.Result
	Consume(now int64, q throttle.Query, id string) throttle.Result
	Active(now int64) []throttle.Active

	// Attach makes what the engine reads and keeps on the bus, loads its
	// snapshots and, in a group, takes the member's name; httpURL is
	// where this instance serves.
	Attach(ctx context.Context, b *bus.Bus, httpURL string) error
	// Run starts counting, and calls alerts with every alert the
	// dashboards should show (in a group, every member's).
	Run(alerts func(throttle.Alert)) error
	// Ready reports whether the engine has caught up with the stream:
	// /readyz.
	Ready() bool
	// Reconfigure puts new throttle policies in force, all or none.
	Reconfigure(policies []throttle.Policy) error
	// Sweep frees what has expired by now (Unix ms), though no traffic
	// or read came by: the janitor calls it. Counts are right without it.
	Sweep(now int64)
	// Stats and ThrottleStats are the numbers behind the metrics.
	Stats() aggregator.Stats
	ThrottleStats() []throttle.PolicyStats
	// Settle returns once every part of the engine decides with the
	// moderators' actions up to revision rev of their bucket (in a group,
	// every live member): how an action takes effect for the very next
	// check, wherever it is asked.
	Settle(ctx context.Context, rev uint64) error
	// Status is GET /api/v1/group; nil when standalone (404).
	Status() any
	// Close stops counting, counts what had arrived, saves what is to
	// be saved and lets go of the bus.
	Close(ctx context.Context) error
}

// Config is what both engines are configured with.
type Config struct {
	Stream    string // the JetStream stream of chat events
	Subject   string // the subject filter of chat events (--subject)
	JetStream bool   // false: a core NATS subscription, no replay (standalone only)
	Windows   []rolling.Window
	MaxSkew   time.Duration
	Policies  []throttle.Policy
	// Book holds the moderators' actions the checks decide with (nil:
	// none); cmd/chatpulse keeps it from the bucket CHATPULSE_MODERATION.
	Book     *moderation.Book
	Replicas int // of what the engine creates on the bus
	Instance string
	// SourceStream, if set, is a stream chatpulse does not own that
	// Stream sources (--source-stream, docs/contract.md section 13).
	SourceStream string
	// Input is how payloads are read (--input, with its name and payload
	// limits); nil: chatpulse's own events.
	Input *ingest.Format
	// SnapshotInterval is how often the state is saved; 0: never (and
	// none is loaded).
	SnapshotInterval time.Duration
	// OnOver, if set, is told of every message over a policy that acts
	// (docs/contract.md section 14), from part (a group's partition stage;
	// "" standalone), once for the group and behind its fence; nil:
	// nothing acts.
	OnOver func(part string, o throttle.Over)
	Now    func() time.Time
	Log    *slog.Logger
}

// Defaults fills in what a caller may leave out.
func (c *Config) Defaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Largest is the largest window: how far back a stage replays, and what a
// stream must keep.
func (c *Config) Largest() time.Duration {
	var l time.Duration
	for _, w := range c.Windows {
		l = max(l, w.Size)
	}
	return l
}

// streamMargin is how much longer than the largest window (and the skew)
// a stream chatpulse creates keeps events.
const streamMargin = 10 * time.Minute

// Stream is the chat stream an engine reads, as chatpulse creates it if
// it is missing: it keeps the largest window, the skew a ts may have over
// its publish time, and a margin.
func (c *Config) StreamConfig() bus.StreamConfig {
	return bus.StreamConfig{Stream: c.Stream, Subject: c.Subject, MaxAge: c.Largest() + c.MaxSkew + streamMargin, Replicas: c.Replicas, Source: c.SourceStream}
}

// ReplayFrom is where a stage with no snapshot starts reading: one largest
// window (plus the skew) before now, everything any window can still
// hold.
func (c *Config) ReplayFrom() time.Time { return c.Now().Add(-c.Largest() - c.MaxSkew) }
