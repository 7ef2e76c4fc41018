package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/rolling"
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

// A Part is one stage whose state is saved: its name in the snapshot and
// its sink (aggregator, throttle set, and how far it has handled).
type Part struct {
	Name string
	Sink *ingest.Sink
}

// A Keeper saves and restores the state of parts under names (one per
// standalone instance, one per partition of a group) in a Store, and keeps
// the metrics of contract section 9 about it.
type Keeper struct {
	store  *Store
	config atomic.Pointer[string] // what the state is taken under: windows, policies, partitions
	stream string
	log    *slog.Logger

	took, bytes, restore prometheus.Gauge
	last                 atomic.Int64 // Unix ms of the last snapshot saved
}

// NewKeeper returns a keeper of snapshots taken under config, of stream.
func NewKeeper(store *Store, config, stream string, reg prometheus.Registerer, log *slog.Logger) *Keeper {
	k := &Keeper{store: store, stream: stream, log: log}
	k.SetConfig(config)
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(g)
		return g
	}
	k.took = gauge("chatpulse_snapshot_seconds", "How long taking the last snapshot took (ingest waited only while its state was copied).")
	k.bytes = gauge("chatpulse_snapshot_bytes", "Size of the last snapshot saved or loaded.")
	k.restore = gauge("chatpulse_restore_seconds", "How long loading the snapshot took at the last start or takeover.")
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
// other's label.
func (k *Keeper) SetConfig(config string) { k.config.Store(&config) }

// Save takes a snapshot of parts and saves it under name. pause runs its
// function while nothing changes the parts (ingest.Consumer.Pause): the
// aggregators start writing their state then (copy-on-write) and the
// throttle sets copy theirs, and both are finished, encoded and saved
// after, while ingest goes on. It returns how long ingest waited. A part that has handled nothing (Seq 0) is not saved:
// without it, it is read from the stream as it would be without a
// snapshot.
func (k *Keeper) Save(ctx context.Context, name string, pause func(func()), parts []Part) (time.Duration, error) {
	start := time.Now()
	snap := Snapshot{Stream: k.stream, Created: start.UnixMilli()}
	var (
		paused time.Duration
		agg    []*aggregator.StateWriter
		thr    []*throttle.StateCopy
	)
	pause(func() {
		p := time.Now()
		defer func() { paused = time.Since(p) }()
		snap.Config = *k.config.Load() // the state's, even across a reload
		for _, part := range parts {
			st := Stage{Name: part.Name, Seq: part.Sink.Seq()}
			if st.Seq == 0 {
				continue
			}
			// Both are finished below, once ingest goes on: the
			// aggregator's state copy-on-write, the throttle copy encoded.
			var w *aggregator.StateWriter
			if part.Sink.Agg != nil {
				w = part.Sink.Agg.StartState()
			}
			var c *throttle.StateCopy
			if part.Sink.Thr != nil {
				c = part.Sink.Thr.CopyState()
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
				err = fmt.Errorf("snapshot %s: stage %s: %w", name, snap.Stages[i].Name, e)
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
	if err := k.store.Put(ctx, name, data); err != nil {
		return paused, fmt.Errorf("snapshot %s: %w", name, err)
	}
	k.took.Set(time.Since(start).Seconds())
	k.bytes.Set(float64(len(data)))
	k.last.Store(time.Now().UnixMilli())
	return paused, nil
}

// Restore loads the snapshot saved under name into parts, fresh sinks, and
// returns, per part, the first stream sequence to read (0: no snapshot of
// it; read from the start, as without one). first is the stream's oldest
// sequence: a snapshot that covers less than what came before it cannot be
// caught up from the stream. A snapshot that is missing, corrupt, of
// another version, configuration or stream, or too old is ignored with one
// log line, and nothing is loaded.
func (k *Keeper) Restore(ctx context.Context, name string, first uint64, parts []Part) map[string]uint64 {
	start := time.Now()
	from, err := k.restore1(ctx, name, first, parts)
	switch {
	case errors.Is(err, ErrNone):
		k.log.Info("no snapshot: replaying the stream", "snapshot", name)
		return nil
	case err != nil:
		k.log.Warn("snapshot ignored: replaying the stream", "snapshot", name, "why", err)
		return nil
	}
	k.restore.Set(time.Since(start).Seconds())
	k.log.Info("snapshot loaded", "snapshot", name, "seconds", time.Since(start).Seconds(), "from", from)
	return from
}

func (k *Keeper) restore1(ctx context.Context, name string, first uint64, parts []Part) (map[string]uint64, error) {
	data, err := k.store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	snap, err := Decode(data)
	switch {
	case err != nil:
		return nil, err
	case snap.Config != *k.config.Load():
		return nil, errors.New("taken under other windows, policies or partitions")
	case snap.Stream != k.stream:
		return nil, fmt.Errorf("of stream %s, not %s", snap.Stream, k.stream)
	}
	byName := map[string]*Stage{}
	for i := range snap.Stages {
		st := &snap.Stages[i]
		if st.Seq+1 < first {
			return nil, fmt.Errorf("stage %s covers up to sequence %d, and the stream starts at %d now", st.Name, st.Seq, first)
		}
		byName[st.Name] = st
	}
	from := map[string]uint64{}
	for _, p := range parts {
		st := byName[p.Name]
		if st == nil {
			continue
		}
		if err := load(p.Sink, st); err != nil {
			for _, p := range parts { // none loaded, or all
				reset(p.Sink)
			}
			return nil, fmt.Errorf("stage %s: %w", p.Name, err)
		}
		from[p.Name] = st.Seq + 1
	}
	k.bytes.Set(float64(len(data)))
	return from, nil
}

func load(s *ingest.Sink, st *Stage) error {
	if (s.Agg != nil) != (len(st.Agg) > 0) || (s.Thr != nil) != (len(st.Thr) > 0) {
		return errors.New("holds other parts than this stage has")
	}
	if s.Agg != nil {
		if err := s.Agg.LoadState(st.Agg); err != nil {
			return err
		}
	}
	if s.Thr != nil {
		if err := s.Thr.LoadState(st.Thr); err != nil {
			return err
		}
	}
	return nil
}

// reset empties a sink that may have been loaded in part.
func reset(s *ingest.Sink) {
	if s.Agg != nil {
		s.Agg.Reset()
	}
	if s.Thr != nil {
		s.Thr.Reset()
	}
}
