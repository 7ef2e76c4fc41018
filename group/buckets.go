package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/chatpulse/chatpulse/bus"
)

// settings are what every member of a group must agree on: partitions
// fix where events are filed, windows what partial views can be merged.
type settings struct {
	Partitions int    `json:"partitions"`
	Windows    string `json:"windows"`
}

// ErrPartitions is a --partitions (or --windows) other than the group's.
var ErrPartitions = errors.New("settings differ from the group's")

// agree records the group's settings if it has none yet, and otherwise
// checks that ours are the same.
func agree(ctx context.Context, b *bus.Bus, group string, s settings, replicas int) error {
	kv, err := b.Bucket(ctx, bus.GroupSettings, "chatpulse groups' settings", replicas)
	if err != nil {
		return err
	}
	value, _ := json.Marshal(s)
	if _, err := kv.Create(ctx, group, value); err == nil || !errors.Is(err, bus.ErrKeyChanged) {
		return err
	}
	e, err := kv.Get(ctx, group)
	if err != nil {
		return fmt.Errorf("group %s: settings: %w", group, err)
	}
	var theirs settings
	if err := json.Unmarshal(e.Data, &theirs); err != nil {
		return fmt.Errorf("group %s: settings: %w", group, err)
	}
	if theirs.Partitions != s.Partitions {
		return fmt.Errorf("%w: --partitions %d, but group %s uses %d", ErrPartitions, s.Partitions, group, theirs.Partitions)
	}
	if theirs.Windows != s.Windows {
		return fmt.Errorf("%w: --windows %s, but group %s uses %s", ErrPartitions, s.Windows, group, theirs.Windows)
	}
	return nil
}

// progress keeps, per partition and stage, the newest stream sequence its
// holder has handled, in a bucket without expiry: whoever holds the
// partition next marks what is at or below it as handled before (Replay),
// so alerts and dead letters go out once, even across a member's death
// (then at most the last second or so is handled twice). A holder takes
// the key over when it starts the partition and writes it compare-and-set
// from then on (every second, and at stop), so a previous holder cannot
// write over it.
type progress struct {
	kv *bus.Bucket
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
