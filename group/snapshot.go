package group

import (
	"context"
	"fmt"

	"github.com/chatpulse/chatpulse/engine"
)

// Snapshots of a group (docs/contract.md section 9): one object per
// partition, holding its stages, saved by its owner and loaded by whoever
// holds it next, who then reads only what came after each stage's
// sequence.

func (m *Member) snapshotName(p int) string { return fmt.Sprintf("group.%s.p%d", m.cfg.Group, p) }

// job is run pt's snapshot: its stages.
func (m *Member) job(pt *partition) engine.Job {
	j := engine.Job{Name: m.snapshotName(pt.p), Acting: pt.fence.acting}
	for _, s := range pt.stages {
		j.Stages = append(j.Stages, s.Stage)
	}
	return j
}

// restore loads partition pt's snapshot into its fresh stages, and
// returns per stage the first sequence to read (none: read from the
// start): partitions.restore.
func (m *Member) restore(ctx context.Context, pt *partition) map[string]uint64 {
	if m.keeper == nil {
		return nil
	}
	first, last, err := m.bus.Seqs(ctx, m.cfg.Stream)
	if err != nil {
		m.log.Warn("group: no snapshot loaded", "partition", pt.p, "err", err)
		return nil
	}
	return m.keeper.Restore(ctx, m.job(pt), first, last)
}

// snapshots are the jobs of the snapshot loop: each open run that has
// caught up and may act.
func (m *Member) snapshots() []engine.Job {
	var jobs []engine.Job
	for _, pt := range m.parts.openRuns() {
		if pt.caughtUp() && pt.fence.acting() {
			jobs = append(jobs, m.job(pt))
		}
	}
	return jobs
}
