package group

import (
	"context"
	"time"

	"github.com/chatpulse/chatpulse/bus"
)

// open is a run's opening, on a goroutine of its own: it takes the
// partition's progress over, then resumes this member's parked run of it
// (resume) or loads its snapshot, and starts a feed per stage: from where
// the parked run stopped, after what the snapshot covers, or one largest
// window back. What the previous holder had handled (its progress) is
// marked Replay: no alerts or dead letters again. A Stop meanwhile ends
// it (ctx), and the run never opens.
func (ps *partitions) open(ctx context.Context, pt *partition) {
	defer close(pt.opened)
	through, holder := ps.takeProgress(ctx, pt)
	pt.through = through
	seqs, how := ps.resume(ctx, pt, holder), startWarm
	if seqs == nil {
		if ctx.Err() != nil {
			return // stopped already
		}
		if seqs, how = ps.restore(ctx, pt), startSnapshot; len(seqs) == 0 {
			how = startReplay
		}
	}
	ps.starts.WithLabelValues(how).Inc()
	if !ps.startFeeds(ctx, pt, seqs) {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pt.state == opening { // else Stop has halted it
		ps.move(pt, open)
	}
}

// startFeeds starts the feeds of pt's stages, each from seqs[its name]
// (none: one largest window back), retrying each until it starts or ctx
// is done; false if ctx was done first.
func (ps *partitions) startFeeds(ctx context.Context, pt *partition, seqs map[string]uint64) bool {
	from := ps.from()
	for _, s := range pt.stages {
		for {
			if ctx.Err() != nil {
				return false
			}
			f, caughtUp, err := ps.feeds.Start(ctx, bus.FeedConfig{
				Stream: ps.stream, Filter: ps.filter(pt.p, s.Name), FromTime: from, FromSeq: seqs[s.Name],
				ReplayThrough: pt.through[s.Name], Sink: s, Subject: ps.subject,
			})
			if err == nil {
				s.feed = f
				if caughtUp {
					s.MarkCaughtUp()
					ps.caughtUp(pt)
				}
				break
			}
			ps.log.Warn("group: partition feed not started; retrying", "partition", pt.p, "stage", s.Name, "err", err)
			pause(ctx, time.Second)
		}
	}
	return true
}

// filter is the subject a stage of partition p reads.
func (ps *partitions) filter(p int, name string) string {
	switch name {
	case stageRoom:
		return bus.RoomPartition(p)
	case stageUser:
		return bus.UserPartition(p)
	case stageStray:
		return ps.subject
	}
	return bus.AllPartitions
}

// resume makes pt's stages those of its warm run (this member's parked
// run of the partition), if it can be resumed exactly: nobody held the
// partition since (holder, the claim its progress was last written by,
// is the parked run's), the pipeline has taken in everything its feeds
// delivered, and the stream still holds what comes after. It sends what
// the fence held back when the lease was lost, under pt's claim, and
// returns where each stage reads on; nil if pt is to be built afresh.
//
// Exact: a parked stage's aggregator and policies are the stream's
// state up to the message it last took in, whatever consuming checks
// recorded there were this member's own (no one else held it); reading
// on from the next message gives what a rebuild would. A partition held
// by someone else meanwhile is not resumed: that holder's consuming
// checks are not in the stream.
func (ps *partitions) resume(ctx context.Context, pt *partition, holder uint64) map[string]uint64 {
	w := pt.warm
	if w == nil || ctx.Err() != nil {
		return nil // stopped already: Stop parks it again
	}
	pt.warm = nil
	select { // its Stop may still be stopping its feeds
	case <-w.done:
	case <-ctx.Done():
	}
	why := ""
	ps.mu.RLock()
	gone := w.state == retired
	ps.mu.RUnlock()
	switch {
	case gone:
		why = "its feeds had not all started" // Stop retired it
	case holder != w.claim:
		why = "its progress was written by another claim since" // or could not be read
	case !ps.settle(ctx, w):
		why = "the pipeline had not handled what its feeds delivered"
	}
	seqs := map[string]uint64{}
	if why == "" {
		// The stream may be electing a leader too (the same node lost).
		var first uint64
		var err error
		for deadline := time.Now().Add(2 * ps.lease); ; pause(ctx, 250*time.Millisecond) {
			if first, _, err = ps.seqs(ctx); err == nil || ctx.Err() != nil || time.Now().After(deadline) {
				break
			}
		}
		for _, s := range w.stages {
			seqs[s.Name] = s.next()
			switch {
			case err != nil:
				why = "the stream's first sequence is unknown: " + err.Error()
			case seqs[s.Name] < first:
				why = "the stream no longer holds where it stopped"
			}
		}
	}
	ps.mu.Lock()
	if why != "" {
		if w.state != retired {
			ps.retire(w)
		}
		ps.mu.Unlock()
		ps.log.Warn("group: partition not resumed: rebuilt", "partition", pt.p, "why", why)
		return nil
	}
	ps.move(w, resumed)
	for _, s := range w.stages {
		s.fence = pt.fence
		s.OnCaughtUp = func() { ps.caughtUp(pt) }
		s.Behind()
	}
	pt.stages = w.stages
	ps.mu.Unlock()
	for _, s := range pt.stages {
		s.flush()
	}
	return seqs
}

// settle waits, up to a write's deadline, until the pipeline holds
// nothing more of pt's halted feeds.
func (ps *partitions) settle(ctx context.Context, pt *partition) bool {
	timer := time.NewTimer(ps.leases.WriteTimeout())
	defer timer.Stop()
	for _, s := range pt.stages {
		select {
		case <-s.drained():
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
