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
	Stream  string // created if missing, capturing Subject for MaxAge
	Subject string // the one filter subject of the consumer
	MaxAge  time.Duration
	From    time.Time // where the replay starts
}

// Stream makes sure the chat and dead-letter streams exist, then reads
// the chat stream with an ordered consumer from c.From on. Messages are
// marked Replay until the one that was the stream's last when it reached
// it (marked CaughtUp too); replaying is false when there was nothing to
// replay. An event's Received is the time the stream took it, the same on
// a replay as when it was live.
func (b *Bus) Stream(ctx context.Context, c StreamConfig) (src *Source, replaying bool, err error) {
	js, err := jetstream.New(b.nc)
	if err != nil {
		return nil, false, err
	}
	if err := ensureStreams(ctx, js, c.Stream, c.Subject, c.MaxAge, b); err != nil {
		return nil, false, err
	}
	from := c.From
	cons, err := js.OrderedConsumer(ctx, c.Stream, jetstream.OrderedConsumerConfig{
		// One filter subject: with several, DeliverByStartTime skips
		// messages (nats-server #6076).
		FilterSubjects: []string{c.Subject},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &from,
	})
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consumer: %w", c.Stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: consumer info: %w", c.Stream, err)
	}
	b.log.Info("replaying", "stream", c.Stream, "from", from.UTC().Format(time.RFC3339), "messages", info.NumPending)
	ch := make(chan ingest.Msg, jsBuffer)
	caughtUp := info.NumPending == 0 // owned by the callback from here on
	cc, err := cons.Consume(func(m jetstream.Msg) {
		in := ingest.Msg{Subject: m.Subject(), Data: m.Data(), Header: m.Headers()}
		md, err := m.Metadata()
		if err == nil {
			in.Received = md.Timestamp.UnixMilli()
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
	return newSource(ch, func(m ingest.Msg) ingest.Msg { return m }, func() {
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-time.After(5 * time.Second):
			cc.Stop()
		}
	}), info.NumPending > 0, nil
}

// ensureStreams creates the chat stream (subjects = subject, at least
// maxAge of history, file storage) and the dead-letter stream if they are
// missing. An existing chat stream is used as it is; one that keeps less
// than maxAge is reported.
func ensureStreams(ctx context.Context, js jetstream.JetStream, stream, subject string, maxAge time.Duration, b *Bus) error {
	s, err := js.Stream(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if overlapsOwn(subject) {
			return fmt.Errorf("stream %s: subject %q would also capture chatpulse's own %s> subjects; use a narrower one such as chat.>", stream, subject, OwnPrefix)
		}
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: stream, Subjects: []string{subject}, MaxAge: maxAge,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld,
		})
		if err != nil {
			return fmt.Errorf("create stream %s: %w", stream, err)
		}
		b.log.Info("created stream", "stream", stream, "subject", subject, "max_age", maxAge)
	case err != nil:
		return fmt.Errorf("stream %s: %w", stream, err)
	default:
		if age := s.CachedInfo().Config.MaxAge; age != 0 && age < maxAge {
			b.log.Warn("stream keeps less history than the largest window: a restart cannot rebuild it fully",
				"stream", stream, "max_age", age, "needed", maxAge)
		}
	}
	_, err = js.Stream(ctx, DeadLetterStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: DeadLetterStream, Subjects: []string{DeadLetterPrefix + ">"}, MaxAge: DeadLetterMaxAge,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld,
		})
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	return nil
}
