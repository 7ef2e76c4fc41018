package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// A Value is one version of a key in a JetStream key-value bucket: what
// --policies kv:BUCKET/KEY reads. Deleted is a delete or purge of the key,
// with no Data.
type Value struct {
	Data     []byte
	Revision uint64
	Deleted  bool
}

// ErrNoKey is a key-value bucket or key that does not exist (or was
// deleted).
var ErrNoKey = errors.New("no such key-value bucket or key")

// Get reads the newest value of key in bucket. A bucket or key that does
// not exist, or a deleted key, is ErrNoKey, which names them.
func (b *Bus) Get(ctx context.Context, bucket, key string) (Value, error) {
	if b.js == nil {
		return Value{}, fmt.Errorf("kv:%s/%s: needs JetStream", bucket, key)
	}
	kv, err := b.js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return Value{}, fmt.Errorf("kv:%s/%s: %w: bucket %s not found (create it: nats kv add %s)", bucket, key, ErrNoKey, bucket, bucket)
	}
	if err != nil {
		return Value{}, fmt.Errorf("kv:%s/%s: %w", bucket, key, err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Value{}, fmt.Errorf("kv:%s/%s: %w: key %s not found in bucket %s (put it: nats kv put %s %s ...)", bucket, key, ErrNoKey, key, bucket, bucket, key)
	}
	if err != nil {
		return Value{}, fmt.Errorf("kv:%s/%s: %w", bucket, key, err)
	}
	return Value{Data: e.Value(), Revision: e.Revision()}, nil
}

// Watch calls fn with every version of key in bucket from now on, the
// newest one first, in order, on one goroutine, until ctx is done. It
// returns once the watch is set up: an error then is a bucket that does not
// exist or a connection that cannot ask. The watch is an ordered
// consumer, which the nats client makes again from where it was when it
// loses its place (a reconnect, a gap).
func (b *Bus) Watch(ctx context.Context, bucket, key string, fn func(Value)) error {
	if b.js == nil {
		return fmt.Errorf("kv:%s/%s: needs JetStream", bucket, key)
	}
	kv, err := b.js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("kv:%s/%s: %w", bucket, key, err)
	}
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return fmt.Errorf("kv:%s/%s: watch: %w", bucket, key, err)
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil { // the newest values have all come
					continue
				}
				fn(Value{Data: e.Value(), Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut})
			}
		}
	}()
	return nil
}
