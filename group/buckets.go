package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// configBucket holds each group's fixed settings, under the group's name.
const configBucket = "CHATPULSE_GROUPS"

// leaseBucket holds a group's member and partition leases.
func leaseBucket(group string) string { return "CHATPULSE_GROUP_" + group }

// settings are what every member of a group must agree on.
type settings struct {
	Partitions int `json:"partitions"`
}

// ErrPartitions is a --partitions other than the group's.
var ErrPartitions = errors.New("partitions differ from the group's")

// agree records the group's settings if it has none yet, and otherwise
// checks that ours are the same.
func agree(ctx context.Context, js jetstream.JetStream, group string, s settings, replicas int) error {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: configBucket, Replicas: replicas, Description: "chatpulse groups' settings"})
	if err != nil {
		return fmt.Errorf("key-value bucket %s: %w", configBucket, err)
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
	return nil
}

// openLeases makes the group's lease bucket: keys live ttl after their
// last write, and their expiry is told to watchers (LimitMarkerTTL), so
// that a member that dies is seen gone within about ttl.
func openLeases(ctx context.Context, js jetstream.JetStream, group string, replicas int, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         leaseBucket(group),
		Description:    "chatpulse group " + group + ": members and partition owners",
		TTL:            ttl,
		LimitMarkerTTL: time.Second,
		Storage:        jetstream.MemoryStorage,
		Replicas:       replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", leaseBucket(group), err)
	}
	return kv, nil
}
