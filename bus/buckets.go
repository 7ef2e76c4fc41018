package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A Bucket is a JetStream key-value bucket that chatpulse makes and
// writes itself: a group's settings, its progress, and its leases, which
// need compare-and-set writes and a watch of every key. It is safe for
// concurrent use.
type Bucket struct {
	name string
	kv   jetstream.KeyValue
}

// An Entry is one change of a key that a watch delivers. Deleted is a
// delete, a purge, or the key's expiry (JetStream's marker), with no Data.
type Entry struct {
	Key string
	Value
	Created time.Time // when the server stored this version, on its clock
}

// ErrKeyChanged is a compare-and-set write that lost: a Create of a key
// that exists, or an Update or Delete of a key whose newest revision is
// not the one given (someone else wrote it, or it expired).
var ErrKeyChanged = errors.New("key exists or has changed")

// Bucket makes the key-value bucket name if it does not exist (file
// storage, no expiry), or updates its description and replicas.
func (b *Bus) Bucket(ctx context.Context, name, description string, replicas int) (*Bucket, error) {
	return b.bucket(ctx, jetstream.KeyValueConfig{Bucket: name, Description: description, Replicas: replicas})
}

// LeaseBucket makes a bucket of leases: its keys live ttl after their
// last write, in memory, and their expiry is told to watchers
// (LimitMarkerTTL), so that a writer that dies is seen gone within about
// ttl.
func (b *Bus) LeaseBucket(ctx context.Context, name, description string, ttl time.Duration, replicas int) (*Bucket, error) {
	return b.bucket(ctx, jetstream.KeyValueConfig{
		Bucket:         name,
		Description:    description,
		TTL:            ttl,
		LimitMarkerTTL: time.Second,
		Storage:        jetstream.MemoryStorage,
		Replicas:       replicas,
	})
}

func (b *Bus) bucket(ctx context.Context, cfg jetstream.KeyValueConfig) (*Bucket, error) {
	if b.js == nil {
		return nil, fmt.Errorf("key-value bucket %s: needs JetStream", cfg.Bucket)
	}
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, cfg)
	if err == nil && cfg.Replicas > 1 {
		err = awaitLeader(ctx, kv)
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w", cfg.Bucket, err)
	}
	return &Bucket{name: cfg.Bucket, kv: kv}, nil
}

// awaitLeader waits until a replicated bucket's stream has a leader. A
// bucket made a moment ago on a cluster may have none yet, and a write
// to it is then answered "no response from stream".
func awaitLeader(ctx context.Context, kv jetstream.KeyValue) error {
	for {
		st, err := kv.Status(ctx)
		if err == nil {
			if s, ok := st.(*jetstream.KeyValueBucketStatus); !ok || s.StreamInfo().Cluster == nil || s.StreamInfo().Cluster.Leader != "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its stream has no leader yet: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Get reads the newest value of key; a key that does not exist or was
// deleted is ErrNoKey.
func (k *Bucket) Get(ctx context.Context, key string) (Value, error) {
	e, err := k.kv.Get(ctx, key)
	if err != nil {
		return Value{}, k.err(key, err)
	}
	return Value{Data: e.Value(), Revision: e.Revision()}, nil
}

// Put writes key whatever its revision, and returns the new revision.
func (k *Bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.kv.Put(ctx, key, value)
	return rev, k.err(key, err)
}

// Create writes key if it does not exist (or was deleted, or expired),
// and returns the new revision; a key that exists is ErrKeyChanged.
func (k *Bucket) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.kv.Create(ctx, key, value)
	return rev, k.err(key, err)
}

// Update writes key if its newest revision is last, and returns the new
// revision; otherwise it is ErrKeyChanged.
func (k *Bucket) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := k.kv.Update(ctx, key, value, last)
	return rev, k.err(key, err)
}

// Delete deletes key if its newest revision is last (0: whatever it is);
// otherwise it is ErrKeyChanged.
func (k *Bucket) Delete(ctx context.Context, key string, last uint64) error {
	return k.err(key, k.kv.Delete(ctx, key, jetstream.LastRevision(last)))
}

// WatchAll delivers the newest version of every key, then nil once those
// have all come, then every change, in order, until ctx is done or the
// watch breaks (the connection closed under it): then the channel is
// closed. It returns once the watch is set up.
func (k *Bucket) WatchAll(ctx context.Context) (<-chan *Entry, error) { return k.Watch(ctx) }

// Watch is WatchAll of the keys matching one of filters (subject
// wildcards: act.>); none: every key.
func (k *Bucket) Watch(ctx context.Context, filters ...string) (<-chan *Entry, error) {
	var w jetstream.KeyWatcher
	var err error
	if len(filters) == 0 {
		w, err = k.kv.WatchAll(ctx)
	} else {
		w, err = k.kv.WatchFiltered(ctx, filters)
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: watch: %w", k.name, err)
	}
	// As deep as the client's own channel, so that what it has taken in
	// is here to be read at once.
	out := make(chan *Entry, 256)
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-ctx.Done():
				return
			case u, ok := <-w.Updates():
				if !ok {
					return
				}
				e = u
			}
			var x *Entry
			if e != nil {
				x = &Entry{Key: e.Key(), Value: Value{Data: e.Value(), Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}, Created: e.Created()}
			}
			select {
			case <-ctx.Done():
				return
			case out <- x:
			}
		}
	}()
	return out, nil
}

// err names the bucket and key, and maps JetStream's errors to the two
// that callers decide on: ErrKeyChanged and ErrNoKey.
func (k *Bucket) err(key string, err error) error {
	var api *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch),
		// Replicated streams say wrong last sequence with another code,
		// which ErrKeyExists does not match.
		errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return fmt.Errorf("key-value bucket %s: key %s: %w (%v)", k.name, key, ErrKeyChanged, err)
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("key-value bucket %s: key %s: %w", k.name, key, ErrNoKey)
	}
	return fmt.Errorf("key-value bucket %s: key %s: %w", k.name, key, err)
}
