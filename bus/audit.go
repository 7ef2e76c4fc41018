package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnsureModerationLog makes the stream that keeps the moderators' audit
// trail (ModerationLogStream, 30 days of chatpulse.moderation.>) if it is
// missing. Without JetStream there is none: the trail is only published.
func (b *Bus) EnsureModerationLog(ctx context.Context, replicas int) error {
	if b.dead.js == nil { // no JetStream
		return nil
	}
	_, err := b.js.Stream(ctx, ModerationLogStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = b.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: ModerationLogStream, Subjects: []string{ModerationPrefix + ">"}, MaxAge: ModerationLogMaxAge,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: max(replicas, 1),
		})
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", ModerationLogStream, err)
	}
	return nil
}

// Audit publishes one entry of the moderators' audit trail on
// chatpulse.moderation.<kind>, with id as its Nats-Msg-Id, so that the
// stream keeps one of each even when every member of a group publishes it
// (an expiry); with JetStream it waits for the stream's ack.
func (b *Bus) Audit(ctx context.Context, kind, id string, data []byte) error {
	msg := &nats.Msg{Subject: ModerationPrefix + kind, Header: nats.Header{nats.MsgIdHdr: {id}}, Data: data}
	if b.dead.js == nil { // no JetStream
		return b.nc.PublishMsg(msg)
	}
	_, err := b.js.PublishMsg(ctx, msg)
	return err
}
