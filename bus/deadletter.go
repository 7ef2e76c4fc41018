package bus

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/ingest"
)

// Dead letters (docs/contract.md section 1): every rejected event is republished,
// its payload unchanged, to chatpulse.deadletter.<reason>, and none is
// lost silently. With JetStream each is published to the dead-letter
// stream and its ack awaited; a refusal, a missing ack or a publish that
// could not even be sent is counted (DeadLetterFailed) and logged.
//
// The acks are awaited asynchronously, up to deadLetterWindow at a time:
// dead letters come from ingest's goroutine, and waiting for each ack in
// turn would hold ingest up by a round trip per rejected event. Only when
// the window is full does a dead letter wait, until an ack or a timeout
// frees a place.
const (
	deadLetterWindow    = 1024
	deadLetterAckWait   = 5 * time.Second
	deadLetterStallWait = 5 * time.Second
)

// deadLetterMsg is the dead letter of m: its payload, its headers, what
// was wrong (Chatpulse-Error) and where it came from (Chatpulse-Subject).
// A header named Nats-* is an instruction to NATS: the publisher's
// Nats-Expected-Stream, Nats-Expected-Last-* or Nats-Msg-Id were meant for
// the chat stream, and applied to the dead-letter stream they would make
// it refuse or de-duplicate the dead letter. So they are kept under
// OriginalHeaderPrefix; other headers are kept as they are.
func deadLetterMsg(m *ingest.Msg, e *ingest.Error) *nats.Msg {
	h := make(nats.Header, len(m.Header)+2)
	for k, v := range m.Header {
		if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
			k = OriginalHeaderPrefix + k
		}
		h[k] = v
	}
	h.Set(ErrorHeader, e.Msg)
	h.Set(SubjectHeader, m.Subject)
	// Any Nats-* header from here on is chatpulse's own, for the
	// dead-letter stream. An event read from a stream is named by its
	// sequence there: the dead-letter stream keeps one dead letter of it
	// even if it is rejected twice (by a group member that took over a
	// partition and handles again the last second its holder handled).
	if m.Seq != 0 {
		h.Set(nats.MsgIdHdr, strconv.FormatUint(m.Seq, 10)+"|"+m.Subject)
	}
	return &nats.Msg{Subject: DeadLetterPrefix + string(e.Reason), Data: m.Data, Header: h}
}

// deadLetters publishes dead letters and counts the ones lost.
type deadLetters struct {
	nc     *nats.Conn
	js     jetstream.JetStream // nil without JetStream: plain publishes, nothing to ack
	log    *slog.Logger
	failed atomic.Uint64
	logged logEvery
}

// start sets d up on nc, publishing with acks when jetStream.
func (d *deadLetters) start(nc *nats.Conn, jetStream bool, log *slog.Logger) error {
	d.nc, d.log = nc, log
	if !jetStream {
		return nil
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(deadLetterWindow),
		jetstream.WithPublishAsyncTimeout(deadLetterAckWait),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { d.fail(m.Subject, err) }))
	if err != nil {
		return err
	}
	d.js = js
	return nil
}

// publish sends a dead letter; with JetStream its ack comes later.
func (d *deadLetters) publish(m *nats.Msg) {
	var err error
	if d.js != nil {
		_, err = d.js.PublishMsgAsync(m, jetstream.WithStallWait(deadLetterStallWait))
	} else {
		err = d.nc.PublishMsg(m)
	}
	if err != nil {
		d.fail(m.Subject, err)
	}
}

// fail counts a lost dead letter, and logs at most one line every 10
// seconds.
func (d *deadLetters) fail(subject string, err error) {
	total := d.failed.Add(1)
	if d.logged.due(10 * time.Second) {
		d.log.Warn("dead letter not kept", "subject", subject, "err", err, "failed_total", total)
	}
}

// flush waits for the outstanding acks. Each one comes, or times out and
// is counted as failed, within deadLetterAckWait: so every dead letter is
// counted once, and Close waits at most that long.
func (d *deadLetters) flush() {
	if d.js == nil {
		return
	}
	select {
	case <-d.js.PublishAsyncComplete():
	case <-time.After(deadLetterAckWait + time.Second):
	}
}

// logEvery lets a log line through at most once per interval, so that a
// flood of one failure is a line per interval, not a line per failure.
type logEvery struct {
	mu   sync.Mutex
	last time.Time
}

func (l *logEvery) due(interval time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= interval {
		l.last = now
		return true
	}
	return false
}
