package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
func agree(ctx context.Context, js jetstream.JetStream, group string, s settings, replicas int) error {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.GroupSettings, Replicas: replicas, Description: "chatpulse groups' settings"})
	if err != nil {
		return fmt.Errorf("key-value bucket %s: %w", bus.GroupSettings, err)
	}
	value, _ := json.Marshal(s)
	if _, err := kv.Create(ctx, group, value); err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	e, err := kv.Get(ctx, group)
	if err != nil {
		return fmt.Errorf("group %s: settings: %w", group, err)
	}
	var theirs settings
	if err := json.Unmarshal(e.Value(), &theirs); err != nil {
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

// openLeases makes the group's lease bucket: keys live ttl after their
// last write, and their expiry is told to watchers (LimitMarkerTTL), so
// that a member that dies is seen gone within about ttl.
func openLeases(ctx context.Context, js jetstream.JetStream, group string, replicas int, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         bus.GroupLeases(group),
		Description:    "chatpulse group " + group + ": members and partition owners",
		TTL:            ttl,
		LimitMarkerTTL: time.Second,
		Storage:        jetstream.MemoryStorage,
		Replicas:       replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", bus.GroupLeases(group), err)
	}
	return kv, nil
}

// progress keeps, per partition and stage, the newest stream sequence its
// holder has handled, in a bucket without expiry: whoever holds the
// partition next marks what is at or below it as handled before (Replay),
// so alerts and dead letters go out once, even across a member's death
// (then at most the last second or so is handled twice).
type progress struct {
	kv jetstream.KeyValue
}

func openProgress(ctx context.Context, js jetstream.JetStream, group string, replicas int) (*progress, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bus.GroupProgress(group), Description: "chatpulse group " + group + ": how far each partition was handled",
		Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", bus.GroupProgress(group), err)
	}
	return &progress{kv: kv}, nil
}

func progressKey(p int) string { return "p." + strconv.Itoa(p) }

// get is partition p's progress, if any was recorded.
func (pr *progress) get(ctx context.Context, p int) (map[string]uint64, bool) {
	e, err := pr.kv.Get(ctx, progressKey(p))
	if err != nil {
		return nil, false
	}
	var seqs map[string]uint64
	if json.Unmarshal(e.Value(), &seqs) != nil {
		return nil, false
	}
	return seqs, true
}

func (pr *progress) put(ctx context.Context, p int, seqs map[string]uint64) error {
	value, _ := json.Marshal(seqs)
	_, err := pr.kv.Put(ctx, progressKey(p), value)
	return err
}
