package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// keeperOf is a Keeper on the snapshot store of a JetStream server of
// its own, and a stage of windows ws that handled one event, up to stream
// sequence 7.
func keeperOf(t *testing.T) (k *Keeper, store *bus.Objects, s *Stage, ws []rolling.Window) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(bus.Options{Host: "127.0.0.1", JetStream: true, DataDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if store, err = b.Snapshots(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	k = NewKeeper(store, "config", "CHAT", prometheus.NewRegistry(), log)
	ws, _ = rolling.ParseWindows("1m")
	agg, _ := aggregator.New(ws)
	s = &Stage{Name: "room", Agg: agg}
	agg.Observe(1000, []chat.Event{{Room: "r", User: "u", TS: 1000}}, nil)
	s.Handled(7, false)
	return k, store, s, ws
}

// A job that is no longer its owner's when its snapshot is about to be
// written (a group member that lost the partition meanwhile) writes
// nothing; one that still is, writes.
func TestSaveOnlyWhileActing(t *testing.T) {
	k, store, s, ws := keeperOf(t)
	ctx := context.Background()
	acting := true
	job := Job{Name: "group.g.p0", Stages: []*Stage{s}, Acting: func() bool { return acting }}
	inline := func(f func()) { f() }

	acting = false
	if _, err := k.Save(ctx, job, inline); !errors.Is(err, errNotActing) {
		t.Fatalf("Save of a job no longer acting: %v, want errNotActing", err)
	}
	if _, err := store.Get(ctx, job.Name); !errors.Is(err, bus.ErrNoObject) {
		t.Fatalf("after the Save of a job no longer acting, the store has its snapshot (err %v)", err)
	}
	acting = true
	if _, err := k.Save(ctx, job, inline); err != nil {
		t.Fatalf("Save of an acting job: %v", err)
	}
	fresh, _ := aggregator.New(ws)
	if from := k.Restore(ctx, Job{Name: job.Name, Stages: []*Stage{{Name: "room", Agg: fresh}}}, 1, 7); from["room"] != 8 {
		t.Fatalf("restored from %v, want room from sequence 8", from)
	}
}

// A snapshot is ignored, and nothing of it loaded, when the stream
// contradicts it: it covers messages the stream no longer holds (the
// stream starts after the message after it), or messages the stream
// never had (it ends before the snapshot's sequence: another stream of
// the name).
func TestRestoreRefusesWhatTheStreamContradicts(t *testing.T) {
	k, _, s, ws := keeperOf(t)
	ctx := context.Background()
	if _, err := k.Save(ctx, Job{Name: "standalone.CHAT.i", Stages: []*Stage{s}}, func(f func()) { f() }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		first, last uint64
		want        bool
	}{
		{1, 7, true}, {8, 20, true}, // the stream holds every message after it
		{9, 20, false}, // message 8 is gone from the stream
		{1, 6, false},  // the stream never reached 7
		{0, 0, false},  // an empty stream, made again
	} {
		fresh, _ := aggregator.New(ws)
		from := k.Restore(ctx, Job{Name: "standalone.CHAT.i", Stages: []*Stage{{Name: "room", Agg: fresh}}}, c.first, c.last)
		loaded := fresh.Stats().Rooms > 0
		if (from["room"] == 8) != c.want || loaded != c.want {
			t.Errorf("stream %d..%d: restored from %v, state loaded %v; want loaded %v", c.first, c.last, from, loaded, c.want)
		}
	}
}

// A preloaded local copy is kept only when the store holds that very
// snapshot; a copy that is corrupt, of another configuration or of
// another snapshot is not, and the store's snapshot is loaded instead,
// exactly: nothing of the copy stays.
func TestPreloadKeptOnlyIfTheStoreHoldsIt(t *testing.T) {
	k, store, s, ws := keeperOf(t)
	dir := t.TempDir()
	k.KeepLocal(dir, nil)
	ctx := context.Background()
	name := "standalone.CHAT.i"
	inline := func(f func()) { f() }
	if _, err := k.Save(ctx, Job{Name: name, Stages: []*Stage{s}}, inline); err != nil {
		t.Fatal(err)
	}
	restore := func(config string) (from map[string]uint64, rooms int, log string) {
		t.Helper()
		var buf bytes.Buffer
		fresh, _ := aggregator.New(ws)
		job := Job{Name: name, Stages: []*Stage{{Name: "room", Agg: fresh}}}
		k2 := NewKeeper(store, "config", "CHAT", prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&buf, nil)))
		k2.KeepLocal(dir, StartPreload(dir, job, config, "CHAT"))
		from = k2.Restore(ctx, job, 1, 100)
		return from, fresh.Stats().Rooms, buf.String()
	}
	if from, rooms, log := restore("config"); from["room"] != 8 || rooms != 1 || !strings.Contains(log, "local_copy=true") {
		t.Errorf("the store's own snapshot copied: from %v, %d rooms; log %s", from, rooms, log)
	}
	if from, rooms, log := restore("other"); from["room"] != 8 || rooms != 1 || !strings.Contains(log, "local_copy=false") {
		t.Errorf("a copy of another configuration: from %v, %d rooms; log %s", from, rooms, log)
	}
	// The store takes a later snapshot whose copy is not kept.
	s.Agg.Observe(2000, []chat.Event{{Room: "r2", User: "u", TS: 2000}}, nil)
	s.Handled(9, false)
	if _, err := NewKeeper(store, "config", "CHAT", prometheus.NewRegistry(), slog.New(slog.DiscardHandler)).Save(ctx, Job{Name: name, Stages: []*Stage{s}}, inline); err != nil {
		t.Fatal(err)
	}
	if from, rooms, log := restore("config"); from["room"] != 10 || rooms != 2 || !strings.Contains(log, "the store holds another") {
		t.Errorf("a copy of an earlier snapshot: from %v, %d rooms; log %s", from, rooms, log)
	}
	if err := os.WriteFile(localPath(dir, name), []byte(localMagic+"id\ngarbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if from, rooms, log := restore("config"); from["room"] != 10 || rooms != 2 || !strings.Contains(log, "local snapshot copy not used") {
		t.Errorf("a corrupt copy: from %v, %d rooms; log %s", from, rooms, log)
	}
}
