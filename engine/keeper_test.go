package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
)

// A job that is no longer its owner's when its snapshot is about to be
// written (a group member that lost the partition meanwhile) writes
// nothing; one that still is, writes.
func TestSaveOnlyWhileActing(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(bus.Options{Host: "127.0.0.1", JetStream: true, DataDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	store, err := b.Snapshots(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	k := NewKeeper(store, "config", "CHAT", prometheus.NewRegistry(), log)
	ws, _ := rolling.ParseWindows("1m")
	agg, _ := aggregator.New(ws)
	s := &Stage{Name: "room", Agg: agg}
	agg.Observe(1000, []chat.Event{{Room: "r", User: "u", TS: 1000}}, nil)
	s.Handled(7, false)
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
	if from := k.Restore(ctx, Job{Name: job.Name, Stages: []*Stage{{Name: "room", Agg: fresh}}}, 1); from["room"] != 8 {
		t.Fatalf("restored from %v, want room from sequence 8", from)
	}
}
