package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/bus"
)

// progress keeps, per partition and stage, the newest stream sequence its
// holder has handled, in a bucket without expiry: whoever holds the
// partition next marks what is at or below it as handled before (Replay),
// so alerts and dead letters go out once, even across a member's death
// (then at most the last second or so is handled twice). A holder takes
// the key over when it starts the partition and writes it compare-and-set
// from then on (every second, and at stop), so a previous holder cannot
// write over it.
type progress struct {
	kv bucket
}

// bucket is the progress bucket: a bus.Bucket; the tests' is a fake.
type bucket interface {
	Get(ctx context.Context, key string) (bus.Value, error)
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
}

func openProgress(ctx context.Context, b *bus.Bus, group string, replicas int) (*progress, error) {
	kv, err := b.Bucket(ctx, bus.GroupProgress(group), "chatpulse group "+group+": how far each partition was handled", replicas)
	if err != nil {
		return nil, err
	}
	return &progress{kv: kv}, nil
}

func progressKey(p int) string { return "p." + strconv.Itoa(p) }

// holderKey is, in a progress value beside the stages' sequences, the
// claim (the revision of the owner key's write that claimed the
// partition) of the holder that wrote it: a member that gets a partition
// back learns from it whether anyone held it in between (resume).
const holderKey = "claim"

// get is partition p's progress, the claim of the holder that wrote it (0:
// not said) and its revision; bus.ErrNoKey if none was recorded.
func (pr *progress) get(ctx context.Context, p int) (seqs map[string]uint64, claim, rev uint64, err error) {
	e, err := pr.kv.Get(ctx, progressKey(p))
	if err != nil {
		return nil, 0, 0, err
	}
	if err := json.Unmarshal(e.Data, &seqs); err != nil {
		return nil, 0, 0, fmt.Errorf("progress of partition %d: %w", p, err)
	}
	claim = seqs[holderKey]
	delete(seqs, holderKey)
	return seqs, claim, e.Revision, nil
}

// take writes partition p's progress as seqs, by the holder of claim, if
// its revision is still rev (0: if it does not exist), and returns the
// new revision.
func (pr *progress) take(ctx context.Context, p int, seqs map[string]uint64, claim, rev uint64) (uint64, error) {
	value := progressValue(seqs, claim)
	if rev == 0 {
		return pr.kv.Create(ctx, progressKey(p), value)
	}
	return pr.kv.Update(ctx, progressKey(p), value, rev)
}

// put is take by a holder: with rev 0 (its take failed) whatever the
// revision, unfenced.
func (pr *progress) put(ctx context.Context, p int, seqs map[string]uint64, claim, rev uint64) (uint64, error) {
	if rev == 0 {
		return pr.kv.Put(ctx, progressKey(p), progressValue(seqs, claim))
	}
	return pr.take(ctx, p, seqs, claim, rev)
}

func progressValue(seqs map[string]uint64, claim uint64) []byte {
	v := maps.Clone(seqs)
	if v == nil {
		v = map[string]uint64{}
	}
	v[holderKey] = claim
	value, _ := json.Marshal(v)
	return value
}

// progressWrite is a run's last write of its partition's progress.
type progressWrite struct {
	mu   sync.Mutex        // the ticker and Stop both write
	rev  uint64            // its revision (0: none to compare with)
	seqs map[string]uint64 // what it said
}

// takeProgress is, per stage, the newest stream sequence that the
// partition's previous holder had handled; with no previous holder, the
// stream's newest: what came before this group counted is history. It
// takes the progress key over (writes it, compare-and-set, as it found
// it), so that a previous holder that still writes to it fails from then
// on: what it handles after that is handled again here, and alerted once.
//
// It also returns the claim of the holder that last wrote the key (0:
// none, or unknown).
func (ps *partitions) takeProgress(ctx context.Context, pt *partition) (through map[string]uint64, holder uint64) {
	// A bucket that does not answer (a NATS node lost, a leader being
	// elected) is asked again for two leases: the partition cannot answer
	// before anyway, and going on without its progress would alert again
	// what its previous holder alerted.
	deadline := time.Now().Add(2 * ps.lease)
	for changed := 0; changed < 3; {
		var rev uint64
		var err error
		through, holder, rev, err = ps.prog.get(ctx, pt.p)
		if errors.Is(err, bus.ErrNoKey) {
			_, last, err := ps.seqs(ctx)
			if err != nil {
				ps.log.Warn("group: stream's last sequence unknown; replaying from the start as live", "err", err)
			}
			through = map[string]uint64{stageRoom: last, stageUser: last, stageStray: last, stageAll: last}
		} else if err != nil {
			if ctx.Err() != nil || time.Now().After(deadline) {
				ps.log.Warn("group: progress unknown", "partition", pt.p, "err", err)
				return nil, 0
			}
			pause(ctx, 250*time.Millisecond)
			continue
		}
		rev, err = ps.prog.take(ctx, pt.p, through, pt.claim, rev)
		switch {
		case err == nil:
			pt.prog.mu.Lock()
			pt.prog.rev, pt.prog.seqs = rev, through
			pt.prog.mu.Unlock()
			return through, holder
		case errors.Is(err, bus.ErrKeyChanged): // the previous holder wrote it meanwhile: read it again
			changed++
		case ctx.Err() != nil || time.Now().After(deadline):
			ps.log.Warn("group: progress not taken over", "partition", pt.p, "err", err)
			return through, holder
		default:
			pause(ctx, 250*time.Millisecond)
		}
	}
	ps.log.Warn("group: progress not taken over: the previous holder keeps writing it", "partition", pt.p)
	return through, 0
}

// saveProgress writes how far run pt has handled its partition, once its
// opening is over, if that moved since its last write, compare-and-set on
// that write's revision: it fails once the next holder has taken the key
// over. A run that knows of nothing handled (its opening stopped before it
// learnt its progress) writes nothing: zeros would have the next holder
// alert again what was alerted.
func (ps *partitions) saveProgress(ctx context.Context, pt *partition) {
	select {
	case <-pt.opened:
	default:
		return
	}
	seqs := map[string]uint64{}
	handled := false
	for _, s := range pt.stages {
		seqs[s.Name] = max(s.Seq(), pt.through[s.Name])
		handled = handled || seqs[s.Name] > 0
	}
	pt.prog.mu.Lock()
	defer pt.prog.mu.Unlock()
	if !handled || maps.Equal(seqs, pt.prog.seqs) {
		return
	}
	rev, err := ps.prog.put(ctx, pt.p, seqs, pt.claim, pt.prog.rev)
	if err != nil {
		ps.log.Warn("group: progress not recorded", "partition", pt.p, "err", err)
		return
	}
	pt.prog.rev, pt.prog.seqs = rev, seqs
}

// record writes, every second, how far each open run has handled its
// partition, for whoever holds it next, and sweeps the parked runs.
func (ps *partitions) record(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, pt := range ps.openRuns() {
			wctx, cancel := context.WithTimeout(ctx, ps.leases.WriteTimeout())
			ps.saveProgress(wctx, pt)
			cancel()
		}
		ps.sweep()
	}
}

// filerKey is where the filer keeps how far it has filed
// (docs/contract.md section 13).
const filerKey = "filer"

// filed is the filer's progress: every message of the stream Copy up to
// Seq has been filed, and acknowledged by the chat stream.
type filed struct {
	Copy string `json:"copy"`
	Seq  uint64 `json:"seq"`
}

// filed is the filer's progress, if any was recorded.
func (pr *progress) filed(ctx context.Context) (filed, bool) {
	e, err := pr.kv.Get(ctx, filerKey)
	if err != nil {
		return filed{}, false
	}
	var f filed
	if json.Unmarshal(e.Data, &f) != nil {
		return filed{}, false
	}
	return f, true
}

func (pr *progress) putFiled(ctx context.Context, f filed) error {
	value, _ := json.Marshal(f)
	_, err := pr.kv.Put(ctx, filerKey, value)
	return err
}
