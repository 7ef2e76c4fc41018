package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
