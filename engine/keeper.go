package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
	"github.com/chatpulse/chatpulse/throttle"
)

// ConfigOf names what a state depends on: the windows and the policies,
// and in a group the partitions. A snapshot is used only under the same.
func ConfigOf(windows []rolling.Window, policies []throttle.Policy, partitions int) string {
	ws := ""
	for i, w := range windows {
		if i > 0 {
			ws += ","
		}
		ws += fmt.Sprintf("%s:%d", w.Name, w.Res.Milliseconds())
	}
	p, _ := json.Marshal(policies)
	return fmt.Sprintf("windows=%s partitions=%d policies=%s", ws, partitions, p)
}

// A Keeper saves and restores the state of stages under names (one per
// standalone instance, one per partition of a group) in the object store
// CHATPULSE_SNAPSHOTS, and keeps the metrics of docs/contract.md section 9 about
// it.
type Keeper struct {
	store  *bus.Objects
	config atomic.Pointer[string] // what the state is taken under: windows, policies, partitions
	stream string
	log    *slog.Logger

	took, bytes, restoreTook prometheus.Gauge
	last                     atomic.Int64 // Unix ms of the last snapshot saved

	local string   // where a copy of each snapshot saved is kept ("": none)
	pre   *Preload // the local copy loaded at the start, for the first Restore
}

// KeepLocal keeps a copy of each snapshot saved in dir (local.go), and
// has the first Restore use pre, that copy loaded at the start (nil:
// none), if the store holds that very snapshot. Call it before either.
func (k *Keeper) KeepLocal(dir string, pre *Preload) { k.local, k.pre = dir, pre }

// NewKeeper returns a keeper of snapshots taken under config, of stream.
func NewKeeper(store *bus.Objects, config, stream string, reg prometheus.Registerer, log *slog.Logger) *Keeper {
	k := &Keeper{store: store, stream: stream, log: log}
	k.SetConfig(config)
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(g)
		return g
	}
	k.took = gauge("chatpulse_snapshot_seconds", "How long taking the last snapshot took (ingest waited only while its state was copied).")
	k.bytes = gauge("chatpulse_snapshot_bytes", "Size of the last snapshot saved or loaded.")
	k.restoreTook = gauge("chatpulse_restore_seconds", "How long loading the snapshot took at the last start or takeover.")
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatpulse_snapshot_age_seconds", Help: "Seconds since the last snapshot was saved (0: none yet).",
	}, func() float64 {
		if last := k.last.Load(); last != 0 {
			return time.Since(time.UnixMilli(last)).Seconds()
		}
		return 0
	}))
	return k
}

// SetConfig says that the state is under config from now on: a reload of
// the policies calls it, so that the snapshots saved after it are labelled
// with the policies they hold, and a restart under other policies ignores
// them. Call it while nothing saves (in the function of the Save's pause,
// ingest.Consumer.Pause), so that no snapshot holds one state under the
// other's label: Reconfigure does.
func (k *Keeper) SetConfig(config string) { k.config.Store(&config) }

// Reconfigure runs apply while ingest waits (pause) and, if it succeeds,
// labels the snapshots saved from then on with the configuration it
// returns: the one way the policies of running stages change. k may be
// nil (no snapshots).
func (k *Keeper) Reconfigure(pause func(func()), apply func() (config string, err error)) error {
	var err error
	pause(func() {
		var config string
		if config, err = apply(); err == nil && k != nil {
			k.SetConfig(config)
		}
	})
	return err
}

// A Job is one snapshot: the stages saved under one name.
type Job struct {
	Name   string
	Stages []*Stage
	// Acting, if set, says whether the job's state may still be saved:
	// asked again at the moment of the write, so that a group member that
	// lost a partition meanwhile does not write over its next holder's
	// snapshot.
	Acting func() bool
}

// reset empties every stage of the job: none loaded, or all.
func (j Job) reset() {
	for _, s := range j.Stages {
		s.reset()
	}
}

// handled is how far a job's stages have read, in all, and how many
// consuming checks they recorded: what changes their state.
func (j Job) handled() uint64 {
	var n uint64
	for _, s := range j.Stages {
		n += s.Seq()
		if s.Thr != nil {
			n += s.Thr.Consumed()
		}
	}
	return n
}

// Run saves, every interval, each of the jobs that jobs lists and whose
// stages have handled something since it was last saved, spread over the
// interval so that ingest waits a little at a time, until ctx is done.
func (k *Keeper) Run(ctx context.Context, interval time.Duration, pause func(func()), jobs func() []Job) {
	saved := map[string]uint64{}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for {
		js := jobs()
		step := interval / time.Duration(max(len(js), 1))
		if len(js) == 0 && !wait(step) {
			return
		}
		for _, j := range js {
			if !wait(step) {
				return
			}
			n := j.handled()
			if n == saved[j.Name] {
				continue
			}
			paused, err := k.Save(ctx, j, pause)
			if err != nil {
				k.log.Warn("snapshot not saved", "snapshot", j.Name, "err", err)
				continue
			}
			saved[j.Name] = n // at least: what came during the save is saved next time
			k.log.Debug("snapshot saved", "snapshot", j.Name, "ingest_paused", paused)
		}
	}
}

// Save takes a snapshot of job's stages and saves it under its name. pause
// runs its function while nothing changes the stages
// (ingest.Consumer.Pause): the aggregators start writing their state then
// (copy-on-write) and the throttle sets copy theirs, and both are
// finished, encoded and saved after, while ingest goes on. It returns how
// long ingest waited. A stage that has handled nothing (Seq 0) is not
// saved: without it, it is read from the stream as it would be without a
// snapshot.
func (k *Keeper) Save(ctx context.Context, job Job, pause func(func())) (time.Duration, error) {
	start := time.Now()
	snap := snapshot.Snapshot{Stream: k.stream, Created: start.UnixMilli()}
	var (
		paused time.Duration
		agg    []*aggregator.StateWriter
		thr    []*throttle.StateCopy
	)
	pause(func() {
		p := time.Now()
		defer func() { paused = time.Since(p) }()
		snap.Config = *k.config.Load() // the state's, even across a reload
		for _, s := range job.Stages {
			st := snapshot.Stage{Name: s.Name, Seq: s.Seq()}
			if st.Seq == 0 {
				continue
			}
			// Both are finished below, once ingest goes on: the
			// aggregator's state copy-on-write, the throttle copy encoded.
			var w *aggregator.StateWriter
			if s.Agg != nil {
				w = s.Agg.StartState()
			}
			var c *throttle.StateCopy
			if s.Thr != nil {
				c = s.Thr.CopyState()
			}
			snap.Stages, agg, thr = append(snap.Stages, st), append(agg, w), append(thr, c)
		}
	})
	if len(snap.Stages) == 0 {
		return paused, nil
	}
	var err error
	for i := range snap.Stages { // every one, so that none is left writing
		if agg[i] != nil {
			var e error
			if snap.Stages[i].Agg, e = agg[i].Finish(); e != nil && err == nil {
				err = fmt.Errorf("snapshot %s: stage %s: %w", job.Name, snap.Stages[i].Name, e)
			}
		}
		if thr[i] != nil {
			snap.Stages[i].Thr = thr[i].Append(nil)
		}
	}
	if err != nil {
		return paused, err
	}
	data := snap.Append(make([]byte, 0, snap.Size()))
	if job.Acting != nil && !job.Acting() {
		return paused, errNotActing
	}
	id, err := k.store.Put(ctx, job.Name, data)
	if err != nil {
		return paused, fmt.Errorf("snapshot %s: %w", job.Name, err)
	}
	if k.local != "" {
		if err := writeLocal(k.local, job.Name, id, data); err != nil {
			k.log.Warn("snapshot: no local copy kept", "snapshot", job.Name, "err", err)
		}
	}
	k.took.Set(time.Since(start).Seconds())
	k.bytes.Set(float64(len(data)))
	k.last.Store(time.Now().UnixMilli())
	return paused, nil
}

// Restore loads the snapshot saved under job's name into its stages, fresh
// ones, and returns, per stage name, the first stream sequence to read
// (none: no snapshot of it; read from the start, as without one). first and
// last are the stream's oldest and newest sequences: a snapshot that
// covers less than what came before first cannot be caught up from the
// stream, and one that covers more than last was taken of another stream
// (one deleted and made again under the name): reading on after it would
// skip what this one holds. A snapshot that is missing, corrupt, of
// another version, configuration or stream, too old or ahead of the
// stream is ignored with one log line, and nothing is loaded.
func (k *Keeper) Restore(ctx context.Context, job Job, first, last uint64) map[string]uint64 {
	start := time.Now()
	from, local, err := k.restore(ctx, job, first, last)
	switch {
	case errors.Is(err, bus.ErrNoObject):
		k.log.Info("no snapshot: replaying the stream", "snapshot", job.Name)
		return nil
	case err != nil:
		k.log.Warn("snapshot ignored: replaying the stream", "snapshot", job.Name, "why", err)
		return nil
	}
	k.restoreTook.Set(time.Since(start).Seconds())
	k.log.Info("snapshot loaded", "snapshot", job.Name, "seconds", time.Since(start).Seconds(), "from", from, "local_copy", local)
	return from
}

func (k *Keeper) restore(ctx context.Context, job Job, first, last uint64) (from map[string]uint64, local bool, err error) {
	if p := k.pre; p != nil {
		k.pre = nil // one start's
		if from, used, err := k.fromPreload(ctx, p, job, first, last); used {
			return from, true, err
		}
	}
	data, err := k.store.Get(ctx, job.Name)
	if err != nil {
		return nil, false, err
	}
	snap, err := snapshot.Decode(data)
	if err != nil {
		return nil, false, err
	}
	if from, err = k.usable(snap, job, first, last); err != nil {
		return nil, false, err
	}
	if err := loadStages(job, snap); err != nil {
		return nil, false, err
	}
	k.bytes.Set(float64(len(data)))
	return from, false, nil
}

// fromPreload decides on p, the local copy of job's snapshot loaded into
// its stages: used if the store holds that very snapshot (then from, or
// why the stream contradicts it, its state emptied again); if not, the
// stages are emptied again, for the store's snapshot.
func (k *Keeper) fromPreload(ctx context.Context, p *Preload, job Job, first, last uint64) (from map[string]uint64, used bool, err error) {
	p.Wait()
	if p.err != nil {
		if !errors.Is(p.err, fs.ErrNotExist) {
			k.log.Info("local snapshot copy not used", "snapshot", job.Name, "why", p.err)
		}
		return nil, false, nil
	}
	id, err := k.store.ID(ctx, job.Name)
	if err != nil || id != p.id {
		job.reset()
		k.log.Info("local snapshot copy not used: the store holds another", "snapshot", job.Name, "err", err)
		return nil, false, nil
	}
	if from, err = k.usable(p.snap, job, first, last); err != nil {
		job.reset()
		return nil, true, err
	}
	k.bytes.Set(float64(p.size))
	return from, true, nil
}

// usable checks snap against the state's configuration and the stream's
// first and last sequences (Restore), and returns, per stage of job it
// holds, the first sequence to read after it.
func (k *Keeper) usable(snap *snapshot.Snapshot, job Job, first, last uint64) (map[string]uint64, error) {
	if err := taken(snap, *k.config.Load(), k.stream); err != nil {
		return nil, err
	}
	seqs := map[string]uint64{}
	for _, st := range snap.Stages {
		if st.Seq+1 < first {
			return nil, fmt.Errorf("stage %s covers up to sequence %d, and the stream starts at %d now", st.Name, st.Seq, first)
		}
		if st.Seq > last {
			return nil, fmt.Errorf("stage %s covers up to sequence %d, and the stream ends at %d: another stream of the name", st.Name, st.Seq, last)
		}
		seqs[st.Name] = st.Seq
	}
	from := map[string]uint64{}
	for _, s := range job.Stages {
		if seq, ok := seqs[s.Name]; ok {
			from[s.Name] = seq + 1
		}
	}
	return from, nil
}

var errNotThisStage = errors.New("holds other parts than this stage has")

var errNotActing = errors.New("not written: its partition is no longer this member's")
