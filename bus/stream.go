package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/ingest"
)

// StreamConfig says which JetStream stream to read, and from when.
type StreamConfig struct {
	Stream   string // created if missing, capturing Subject for MaxAge
	Subject  string // the one filter subject of the consumer
	MaxAge   time.Duration
	Replicas int       // of the streams chatpulse creates (0: 1)
	From     time.Time // where the replay starts
	// FromSeq, if set, is where the replay starts instead: the first
	// sequence a snapshot does not cover.
	FromSeq uint64
}

// Stream makes sure the chat and dead-letter streams exist, then reads
// the chat stream with an ordered consumer from c.From on. Messages are
// marked Replay until the one that was the stream's last when it reached
// it (marked CaughtUp too); replaying is false when there was nothing to
// replay. An event's Received is the time the stream took it, the same on
// a replay as when it was live.
func (b *Bus) Stream(ctx context.Context, c StreamConfig) (src *Source, replaying bool, err error) {
	if err := b.EnsureStreams(ctx, c, 0); err != nil {
		return nil, false, err
	}
	js := b.js
	from := c.From
	cfg := jetstream.OrderedConsumerConfig{
		// One filter subject: with several, DeliverByStartTime skips
		// messages (nats-server #6076).
		FilterSubjects: []string{c.Subject},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &from,
	}
	if c.FromSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, c.FromSeq
	}
	cons, err := js.OrderedConsumer(ctx, c.Stream, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consumer: %w", c.Stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consumer info: %w", c.Stream, err)
	}
	if c.FromSeq > 0 {
		b.log.Info("replaying", "stream", c.Stream, "from_sequence", c.FromSeq, "messages", info.NumPending)
	} else {
		b.log.Info("replaying", "stream", c.Stream, "from", from.UTC().Format(time.RFC3339), "messages", info.NumPending)
	}
	ch := make(chan ingest.Msg, jsBuffer)
	caughtUp := info.NumPending == 0 // owned by the callback from here on
	cc, err := cons.Consume(func(m jetstream.Msg) {
		in := ingest.Msg{Subject: m.Subject(), Data: m.Data(), Header: m.Headers()}
		md, err := m.Metadata()
		if err == nil {
			in.Received = md.Timestamp.UnixMilli()
			in.Seq = md.Sequence.Stream
		}
		if !caughtUp {
			in.Replay = true
			in.CaughtUp = err == nil && md.NumPending == 0
			caughtUp = in.CaughtUp
		}
		ch <- in
	}, jetstream.PullMaxMessages(jsBuffer), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		b.log.Warn("jetstream consumer", "stream", c.Stream, "err", err)
	}))
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consume: %w", c.Stream, err)
	}
	return NewSource(ch, func() {
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
			cc.Stop()
		}
	}), info.NumPending > 0, nil
}

// EnsureStreams creates the chat stream (subjects = c.Subject, at least
// c.MaxAge of history, file storage) and the dead-letter stream if they
// are missing. With partitions (group mode) the chat stream files events
// by partition (PartitionTransform), and an existing one that does not is
// made to. An existing chat stream is otherwise used as it is; one that
// keeps less than c.MaxAge is reported.
func (b *Bus) EnsureStreams(ctx context.Context, c StreamConfig, partitions int) error {
	js := b.js
	var transform *jetstream.SubjectTransformConfig
	if partitions > 0 {
		src, dest, err := PartitionTransform(c.Subject, partitions)
		if err != nil {
			return err
		}
		transform = &jetstream.SubjectTransformConfig{Source: src, Destination: dest}
	}
	replicas := max(c.Replicas, 1)
	s, err := js.Stream(ctx, c.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if overlapsOwn(c.Subject) {
			return fmt.Errorf("stream %s: subject %q would also capture chatpulse's own %s> subjects; use a narrower one such as chat.>", c.Stream, c.Subject, OwnPrefix)
		}
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: c.Stream, Subjects: []string{c.Subject}, MaxAge: c.MaxAge, SubjectTransform: transform,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: replicas,
		})
		if err != nil {
			return fmt.Errorf("create stream %s: %w", c.Stream, err)
		}
		b.log.Info("created stream", "stream", c.Stream, "subject", c.Subject, "max_age", c.MaxAge, "replicas", replicas, "partitions", partitions)
	case err != nil:
		return fmt.Errorf("stream %s: %w", c.Stream, err)
	default:
		cfg := s.CachedInfo().Config
		if age := cfg.MaxAge; age != 0 && age < c.MaxAge {
			b.log.Warn("stream keeps less history than the largest window: a restart cannot rebuild it fully",
				"stream", c.Stream, "max_age", age, "needed", c.MaxAge)
		}
		if transform != nil {
			if err := b.partition(ctx, cfg, transform); err != nil {
				return err
			}
		}
	}
	_, err = js.Stream(ctx, DeadLetterStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: DeadLetterStream, Subjects: []string{DeadLetterPrefix + ">"}, MaxAge: DeadLetterMaxAge,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: replicas,
		})
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	return nil
}

// partition makes an existing stream file events by partition. What it
// stored before stays under its own subjects, where a group reads it as
// history it does not count (see PartitionTransform).
func (b *Bus) partition(ctx context.Context, cfg jetstream.StreamConfig, want *jetstream.SubjectTransformConfig) error {
	switch have := cfg.SubjectTransform; {
	case have != nil && *have == *want:
		return nil
	case have != nil:
		return fmt.Errorf("%w: stream %s files events as %s, this group needs %s (another --partitions, or another group on this stream?)",
			ErrPartitioned, cfg.Name, have.Destination, want.Destination)
	}
	cfg.SubjectTransform = want
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("stream %s: file events by partition: %w", cfg.Name, err)
	}
	b.log.Warn("stream now files events by partition; events it stored before are not counted by the group", "stream", cfg.Name)
	return nil
}

// ErrPartitioned is a stream partitioned otherwise than a group needs.
var ErrPartitioned = errors.New("stream partitioned otherwise")
