package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnsureModerationLog makes the stream that keeps the audit trail
// (ModerationLogStream, 30 days of chatpulse.moderation.> and
// chatpulse.act.>) if it is missing, and gives one made before acts were
// kept their subjects. Without JetStream there is none: the trail is only
// published.
func (b *Bus) EnsureModerationLog(ctx context.Context, replicas int) error {
	if b.dead.js == nil { // no JetStream
		return nil
	}
	subjects := []string{ModerationPrefix + ">", ActPrefix + ">"}
	s, err := b.js.Stream(ctx, ModerationLogStream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: ModerationLogStream, Subjects: subjects, MaxAge: ModerationLogMaxAge,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: max(replicas, 1),
		})
	case err == nil && !slices.Contains(s.CachedInfo().Config.Subjects, ActPrefix+">"):
		cfg := s.CachedInfo().Config
		cfg.Subjects = append(cfg.Subjects, ActPrefix+">")
		_, err = b.js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", ModerationLogStream, err)
	}
	return nil
}

// Act publishes an act on the chat system, or its undo, on
// chatpulse.act.<kind>, with id as its Nats-Msg-Id (so that the audit
// stream keeps it once, whoever publishes it again); with JetStream it
// waits for the stream's ack.
func (b *Bus) Act(ctx context.Context, kind, id string, data []byte) error {
	return b.publishKept(ctx, &nats.Msg{Subject: ActPrefix + kind, Header: nats.Header{nats.MsgIdHdr: {id}}, Data: data})
}

// Audit publishes one entry of the moderators' audit trail on
// chatpulse.moderation.<kind>, with id as its Nats-Msg-Id, so that the
// stream keeps one of each even when every member of a group publishes it
// (an expiry); with JetStream it waits for the stream's ack.
func (b *Bus) Audit(ctx context.Context, kind, id string, data []byte) error {
	return b.publishKept(ctx, &nats.Msg{Subject: ModerationPrefix + kind, Header: nats.Header{nats.MsgIdHdr: {id}}, Data: data})
}

// SubscribeActs calls fn with every act and undo published on
// chatpulse.act.> (in a group, every member's), as published.
func (b *Bus) SubscribeActs(fn func(data []byte)) (*nats.Subscription, error) {
	return b.nc.Subscribe(ActPrefix+">", func(m *nats.Msg) { fn(m.Data) })
}

// publishKept publishes msg to the audit stream, or, without JetStream,
// only publishes it.
func (b *Bus) publishKept(ctx context.Context, msg *nats.Msg) error {
	if b.dead.js == nil { // no JetStream
		return b.nc.PublishMsg(msg)
	}
	_, err := b.js.PublishMsg(ctx, msg)
	return err
}
