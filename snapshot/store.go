package snapshot

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the JetStream object store that keeps the snapshots.
const Bucket = "CHATPULSE_SNAPSHOTS"

// A Store keeps snapshots by name: one per standalone instance, one per
// partition of a group.
type Store struct {
	obj jetstream.ObjectStore
}

// Open makes the object store if it is missing.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	obj, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      Bucket,
		Description: "chatpulse's snapshots: windows, heaps and throttle state, with the stream sequence they cover",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", Bucket, err)
	}
	return &Store{obj: obj}, nil
}

// Put saves data under name. The object store replaces the previous
// object of that name only once the new one is complete, so a reader never
// sees half of one, even if chatpulse dies while it writes.
func (s *Store) Put(ctx context.Context, name string, data []byte) error {
	_, err := s.obj.PutBytes(ctx, name, data)
	return err
}

// ErrNone is the answer for a name with no snapshot.
var ErrNone = errors.New("no snapshot")

// Get reads the snapshot saved under name.
func (s *Store) Get(ctx context.Context, name string) ([]byte, error) {
	b, err := s.obj.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNone
	}
	return b, err
}
