package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Objects is a JetStream object store of whole objects by name: where
// chatpulse keeps its snapshots (SnapshotBucket).
type Objects struct {
	obj jetstream.ObjectStore
}

// Snapshots makes the snapshots' object store if it is missing.
func (b *Bus) Snapshots(ctx context.Context, replicas int) (*Objects, error) {
	obj, err := b.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      SnapshotBucket,
		Description: "chatpulse's snapshots: windows, heaps and throttle state, with the stream sequence they cover",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", SnapshotBucket, err)
	}
	return &Objects{obj: obj}, nil
}

// Put saves data under name, and returns the id the store gave this
// object (its NUID). The object store replaces the previous object of
// that name only once the new one is complete, so a reader never sees
// half of one, even if chatpulse dies while it writes.
func (o *Objects) Put(ctx context.Context, name string, data []byte) (id string, err error) {
	info, err := o.obj.PutBytes(ctx, name, data)
	if err != nil {
		return "", err
	}
	return info.NUID, nil
}

// ID is the id of the object saved under name now (what Put returned for
// it): a copy of it elsewhere is this object if it was saved with this id.
func (o *Objects) ID(ctx context.Context, name string) (string, error) {
	info, err := o.obj.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", ErrNoObject
	}
	if err != nil {
		return "", err
	}
	return info.NUID, nil
}

// ErrNoObject is the answer for a name with no object.
var ErrNoObject = errors.New("no such object")

// Get reads the object saved under name.
func (o *Objects) Get(ctx context.Context, name string) ([]byte, error) {
	b, err := o.obj.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNoObject
	}
	return b, err
}
