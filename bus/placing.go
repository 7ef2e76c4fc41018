package bus

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// placing is JetStream whose streams, buckets and object stores, made or
// changed, wait out "no suitable peers for placement" and "JetStream
// system temporarily unavailable" for up to placeWait: a NATS node
// restarting, a meta leader being elected, or one that has not heard
// every node's configuration yet, refuses them for a moment, and a
// chatpulse starting then should start, not exit.
type placing struct {
	jetstream.JetStream
	log *slog.Logger
}

// placeWait bounds how long a making waits for its replicas' places.
const placeWait = 30 * time.Second

// JetStream's "no suitable peers for placement" and "JetStream system
// temporarily unavailable".
const (
	codeNoPeers     jetstream.ErrorCode = 10005
	codeUnavailable jetstream.ErrorCode = 10008
)

func (p placing) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return placed(ctx, p.log, cfg.Name, func() (jetstream.Stream, error) { return p.JetStream.CreateStream(ctx, cfg) })
}

func (p placing) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return placed(ctx, p.log, cfg.Name, func() (jetstream.Stream, error) { return p.JetStream.CreateOrUpdateStream(ctx, cfg) })
}

func (p placing) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return placed(ctx, p.log, cfg.Name, func() (jetstream.Stream, error) { return p.JetStream.UpdateStream(ctx, cfg) })
}

func (p placing) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return placed(ctx, p.log, cfg.Bucket, func() (jetstream.KeyValue, error) { return p.JetStream.CreateOrUpdateKeyValue(ctx, cfg) })
}

func (p placing) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return placed(ctx, p.log, cfg.Bucket, func() (jetstream.ObjectStore, error) { return p.JetStream.CreateOrUpdateObjectStore(ctx, cfg) })
}

// placed calls try until it is not refused for want of places or of a
// meta leader, ctx ends, or placeWait has passed.
func placed[T any](ctx context.Context, log *slog.Logger, name string, try func() (T, error)) (T, error) {
	deadline := time.Now().Add(placeWait)
	for pause, logged := 100*time.Millisecond, false; ; pause = min(2*pause, 2*time.Second) {
		v, err := try()
		var api *jetstream.APIError
		if err == nil || !errors.As(err, &api) || api.ErrorCode != codeNoPeers && api.ErrorCode != codeUnavailable || time.Now().After(deadline) {
			return v, err
		}
		if !logged {
			log.Warn("jetstream: cannot make it yet; trying again", "name", name, "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(pause):
		}
	}
}
