package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig is the chat stream as chatpulse creates it if it is
// missing.
type StreamConfig struct {
	Stream   string // its name
	Subject  string // what it captures; with Source, what it takes of Source (">": all)
	MaxAge   time.Duration
	Replicas int // 0: 1
	// Source, if set, is a stream chatpulse does not own that the chat
	// stream sources (--source-stream), instead of capturing Subject
	// itself: see sourced.go.
	Source string
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
	if c.Source != "" && partitions > 0 {
		// The events of a foreign stream are filed by partition by a
		// group's filer, from a copy of their own (filing.go).
		return fmt.Errorf("stream %s: a partitioned stream cannot source %s", c.Stream, c.Source)
	}
	s, err := js.Stream(ctx, c.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound) && c.Source != "":
		if err := b.createSourced(ctx, c, replicas); err != nil {
			return err
		}
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
		if c.Source != "" {
			if err := b.checkSourced(ctx, c, cfg); err != nil {
				return err
			}
		}
		if age := cfg.MaxAge; age != 0 && age < c.MaxAge {
			b.log.Warn("stream keeps less history than the largest window: a restart cannot rebuild it fully",
				"stream", c.Stream, "max_age", age, "needed", c.MaxAge)
		}
		if transform != nil {
			if len(cfg.Sources) > 0 {
				return fmt.Errorf("%w: stream %s sources %s: a group files a foreign stream's events in a stream of chatpulse's own events; name another --stream",
					ErrPartitioned, c.Stream, cfg.Sources[0].Name)
			}
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
