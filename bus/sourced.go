package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// A chat system's own bus keeps its events in a stream chatpulse does not
// own, often with interest retention: Dendrite's DendriteOutputRoomEvent
// keeps a message only while one of its consumers has yet to ack it, and
// one published while nothing has interest is not kept at all. So
// chatpulse does not read it directly. Its chat stream sources it
// (docs/contract.md section 13, --source-stream): the server copies each message,
// subject and headers unchanged plus Nats-Stream-Source (the origin
// stream and sequence), into a stream of chatpulse's with the limits of
// any chat stream (file storage, the largest window and a margin), and
// chatpulse reads and replays that one as it would its own.
//
// The copy is made by the server, on behalf of the sourcing stream,
// through a consumer on the foreign stream that chatpulse neither makes
// nor sees. With nats-server 2.15 (JetStream API level 4) that consumer
// is durable (JS_SRC_<hash>) when the foreign stream is not a limits one,
// and acks by flow control: the foreign stream keeps each message until
// chatpulse's stream has stored it, and no longer, whether chatpulse
// runs or not; the server deletes the consumer when the sourcing stream
// is deleted or stops sourcing (a best-effort try). Older servers use an
// ephemeral one without acks, gone 10 s after the sourcing stream. Either
// way chatpulse leaves no consumer of its own on the foreign stream and
// never writes to it. What the foreign stream received before the chat
// stream sourced it is gone if its own consumers acked it: the source
// must be set up before the traffic.

// createSourced creates the chat stream as a sourcing one: no subjects of
// its own, everything (or c.Subject) of c.Source.
func (b *Bus) createSourced(ctx context.Context, c StreamConfig, replicas int) error {
	src := &jetstream.StreamSource{Name: c.Source}
	if c.Subject != ">" {
		src.FilterSubject = c.Subject
	}
	_, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: c.Stream, Sources: []*jetstream.StreamSource{src}, MaxAge: c.MaxAge,
		Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: replicas,
	})
	if err != nil {
		return fmt.Errorf("create stream %s sourcing %s: %w", c.Stream, c.Source, err)
	}
	b.log.Info("created stream", "stream", c.Stream, "source", c.Source, "subject", c.Subject, "max_age", c.MaxAge, "replicas", replicas)
	b.lookAtSource(ctx, c)
	return nil
}

// checkSourced accepts an existing chat stream if it sources c.Source,
// and tells which it is if not: one stream must not mix chatpulse's own
// events with a foreign format's.
func (b *Bus) checkSourced(ctx context.Context, c StreamConfig, have jetstream.StreamConfig) error {
	if !slices.ContainsFunc(have.Sources, func(s *jetstream.StreamSource) bool { return s.Name == c.Source }) {
		return fmt.Errorf("%w: stream %s exists and does not source %s (it captures %q); name another --stream for --source-stream %s",
			ErrNotSourced, c.Stream, c.Source, have.Subjects, c.Source)
	}
	b.lookAtSource(ctx, c)
	return nil
}

// ErrNotSourced is an existing chat stream that does not source the
// stream --source-stream names.
var ErrNotSourced = errors.New("stream not sourced")

// lookAtSource warns when the foreign stream is missing: the server
// sources it once it exists (retrying with a backoff of up to two
// minutes), and with interest retention what it receives before then is
// lost to chatpulse.
func (b *Bus) lookAtSource(ctx context.Context, c StreamConfig) {
	s, err := b.js.Stream(ctx, c.Source)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		b.log.Warn("the stream to source does not exist yet: the chat stream sources it once it does, and what it keeps only for its own consumers (interest retention) before then is never seen",
			"stream", c.Stream, "source", c.Source)
	case err != nil:
		b.log.Warn("cannot look at the stream to source", "source", c.Source, "err", err)
	default:
		info := s.CachedInfo()
		b.log.Info("sourcing", "stream", c.Stream, "source", c.Source, "retention", info.Config.Retention.String(), "source_messages", info.State.Msgs)
	}
}
