package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
)

// A group on a foreign bus (docs/contract.md section 13) cannot partition
// its events by subject: Dendrite publishes every room's on one subject.
// So the stream SourceCopy(stream) sources the foreign stream (as a
// standalone instance's --stream does, see sourced.go), and one member at
// a time, the filer, reads that copy in order and files each event again
// on chat.<room>.<user> of the group's chat stream, in chatpulse's own
// format, with the Nats-Msg-Id FiledID(copy, sequence): a takeover of the
// filing that files an event again is dropped by the chat stream's
// duplicate window.

// FiledMsg is the message that files ev on the chat stream in chatpulse's
// own form (ingest.AppendNative), on prefix<room>.<user> (each a subject
// token: chat.Token), with Nats-Msg-Id id and ingest.FiledHeader, so that
// a consumer of any --input reads it as chatpulse's own. prefix is that
// of --subject: "chat." for chat.>.
func FiledMsg(prefix string, ev ingest.Event, id string) *nats.Msg {
	return &nats.Msg{
		Subject: prefix + chat.Token(ev.Room) + "." + chat.Token(ev.User),
		// Its own buffer: it is kept until acknowledged.
		Data:   ingest.AppendNative(make([]byte, 0, 64+len(ev.Room)+len(ev.User)+len(ev.ID)+len(ev.Text)), ev),
		Header: nats.Header{nats.MsgIdHdr: {id}, ingest.FiledHeader: {"1"}},
	}
}

// FileOne files one message (FiledMsg) on the chat stream: with
// JetStream it returns once the stream has stored it, or had it already
// (a duplicate of its Nats-Msg-Id within the stream's duplicate window);
// without, once it is published.
func (b *Bus) FileOne(ctx context.Context, m *nats.Msg) error {
	if !b.jetStream {
		if err := b.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("file on %s: %w", m.Subject, err)
		}
		return nil
	}
	if _, err := b.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("file on %s: %w", m.Subject, err)
	}
	return nil
}

// SourceCopy is the stream that sources a foreign stream for a group
// whose chat stream is stream.
func SourceCopy(stream string) string { return stream + "_SOURCE" }

// FiledID is the Nats-Msg-Id of the event filed from message seq of the
// stream copy: "<copy>:<seq>".
func FiledID(copy string, seq uint64) string { return copy + ":" + strconv.FormatUint(seq, 10) }

// FiledFrom is the sequence in copy of the event filed with Nats-Msg-Id
// id, if FiledID(copy, seq) wrote it.
func FiledFrom(copy, id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, copy+":")
	seq, err := strconv.ParseUint(rest, 10, 64)
	return seq, ok && err == nil
}

// Original is message seq of stream (the copy a filed event came from),
// as ingest reads it.
func (b *Bus) Original(ctx context.Context, stream string, seq uint64) (ingest.Msg, error) {
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return ingest.Msg{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		return ingest.Msg{}, fmt.Errorf("stream %s: message %d: %w", stream, seq, err)
	}
	return ingest.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header, Received: m.Time.UnixMilli(), Seq: m.Sequence}, nil
}

// Read reads stream in order from sequence from (0: from its first
// message) with an ordered consumer, as a Source of messages marked for
// no sink; Stop ends it.
func (b *Bus) Read(ctx context.Context, stream string, from uint64) (*Source, error) {
	cfg := jetstream.OrderedConsumerConfig{}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := b.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("stream %s: ordered consumer: %w", stream, err)
	}
	ch, stopping := make(chan jetstream.Msg, jsBuffer), make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-stopping: // nobody reads any more
		}
	}, jetstream.PullMaxMessages(jsBuffer),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			b.log.Warn("jetstream consumer", "stream", stream, "err", err)
		}))
	if err != nil {
		return nil, fmt.Errorf("stream %s: consume: %w", stream, err)
	}
	var src *Source
	conv := func(m jetstream.Msg) (ingest.Msg, bool) {
		in := ingest.Msg{Subject: m.Subject(), Data: m.Data(), Header: m.Headers()}
		md, err := m.Metadata()
		if err != nil {
			return in, false // not a stream's message
		}
		in.Received, in.Seq = md.Timestamp.UnixMilli(), md.Sequence.Stream
		src.pending.Store(md.NumPending)
		return in, true
	}
	src = newSource(ch, conv, func() {
		close(stopping)
		cc.Stop()
		<-cc.Closed()
	})
	return src, nil
}

// File publishes msgs to JetStream, all at once, and returns once every
// one is acknowledged, with how many of them the stream had already and
// dropped as duplicates; or with the first error: then the caller files
// them all again, and those that were stored are dropped as duplicates.
func (b *Bus) File(ctx context.Context, msgs []*nats.Msg) (duplicates int, err error) {
	acks := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := b.js.PublishMsgAsync(m)
		if err != nil {
			return 0, fmt.Errorf("file on %s: %w", m.Subject, err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				duplicates++
			}
		case err := <-f.Err():
			return 0, fmt.Errorf("file on %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return duplicates, nil
}

// MaxPayload is the largest message the server takes.
func (b *Bus) MaxPayload() int { return int(b.nc.MaxPayload()) }

// FiledAfter is the sequences in copy, past after, of the events the
// chat stream holds that were filed from it (by their Nats-Msg-Id,
// FiledID), read from the stream's end back to the first filed at or
// before after, or to its first message; false if that takes more than
// back messages (then the set is not known in full). A filer that died
// between a batch's acknowledgements and the record of its progress left
// some of the batch stored, or all of it, or none: this says which, so
// that the next files the rest and nothing twice, whenever it comes.
func (b *Bus) FiledAfter(ctx context.Context, stream, copy string, after uint64, back int) (map[uint64]bool, bool, error) {
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return nil, false, fmt.Errorf("stream %s: %w", stream, err)
	}
	st := s.CachedInfo().State
	filed := map[uint64]bool{}
	for seq := st.LastSeq; seq >= max(st.FirstSeq, 1); seq-- {
		if st.LastSeq-seq >= uint64(back) {
			return filed, false, nil
		}
		m, err := s.GetMsg(ctx, seq)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			continue // deleted
		case err != nil:
			return nil, false, fmt.Errorf("stream %s: message %d: %w", stream, seq, err)
		}
		n, ok := FiledFrom(copy, m.Header.Get(nats.MsgIdHdr))
		switch {
		case !ok: // not filed from copy
		case n <= after:
			return filed, true, nil
		default:
			filed[n] = true
		}
	}
	return filed, true, nil
}
