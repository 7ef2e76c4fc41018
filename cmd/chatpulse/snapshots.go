package main

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/snapshot"
)

// Snapshots of a standalone instance (contract section 9): one object,
// named for the stream and the instance, holding one stage.

const standaloneStage = "standalone"

// snapshotName is the object a standalone instance keeps its state under.
func (m *Main) snapshotName() string {
	return "standalone." + m.Config.Stream + "." + m.Config.Instance
}

// restore loads the standalone instance's snapshot, if there is a usable
// one, and returns the first stream sequence it does not cover (0: read
// from sc.From, as without one). The streams are made first, so that a
// snapshot can be checked against what the stream still holds.
func (m *Main) restore(ctx context.Context, sc bus.StreamConfig) (uint64, error) {
	if m.Config.SnapshotInterval == 0 {
		return 0, nil
	}
	if err := m.bus.EnsureStreams(ctx, sc, 0); err != nil {
		return 0, err
	}
	store, err := snapshot.Open(ctx, m.bus.JetStream(), m.Config.Replicas)
	if err != nil {
		return 0, err
	}
	m.keeper = snapshot.NewKeeper(store, snapshot.ConfigOf(m.Config.Windows, m.thr.Policies(), 0), m.Config.Stream, m.reg, m.Log)
	first, _, err := m.bus.Seqs(ctx, sc.Stream)
	if err != nil {
		return 0, err
	}
	// Nothing else runs yet, and what a load allocates is the state, kept:
	// a collection meanwhile would only walk it again (a third of the time
	// of a load of a million users).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	from := m.keeper.Restore(ctx, m.snapshotName(), first, []snapshot.Part{{Name: standaloneStage, Sink: m.sink}})
	return from[standaloneStage], nil
}

// snapshots saves the state every --snapshot-interval, when anything was
// handled since the last one, until chatpulse stops.
func (m *Main) snapshots() {
	t := time.NewTicker(m.Config.SnapshotInterval)
	defer t.Stop()
	parts := []snapshot.Part{{Name: standaloneStage, Sink: m.sink}}
	var saved uint64
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		seq := m.sink.Seq()
		if seq == saved {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		paused, err := m.keeper.Save(ctx, m.snapshotName(), m.consumer.Pause, parts)
		cancel()
		if err != nil {
			m.Log.Warn("snapshot not saved", "err", err)
			continue
		}
		saved = seq // at least: whatever came during the save is saved next time
		m.Log.Debug("snapshot saved", "ingest_paused", paused)
	}
}

// lastSnapshot saves the state once everything delivered is counted, as
// chatpulse stops cleanly, so that the next start replays nothing it had.
func (m *Main) lastSnapshot(ctx context.Context) {
	if m.keeper == nil || m.sink.Seq() == 0 {
		return
	}
	parts := []snapshot.Part{{Name: standaloneStage, Sink: m.sink}}
	nothingRuns := func(f func()) { f() } // the consumer has stopped
	if _, err := m.keeper.Save(ctx, m.snapshotName(), nothingRuns, parts); err != nil {
		m.Log.Warn("last snapshot not saved", "err", err)
	}
}
