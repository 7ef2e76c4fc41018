package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options say which NATS server to use.
type Options struct {
	URL   string // an external server or cluster; "" runs the embedded one
	Creds string // credentials file for URL

	// JetStream: dead letters are published to JetStream, with acks; and
	// the embedded server runs JetStream.
	JetStream bool

	// The embedded server: its client address (Port 0: any free port),
	// and with JetStream, its store.
	Host    string
	Port    int
	DataDir string

	Log *slog.Logger
}

// A Bus is chatpulse's connection to NATS, and the embedded server when
// there is one. It is safe for concurrent use.
type Bus struct {
	log *slog.Logger
	ns  *server.Server // nil with an external server
	nc  *nats.Conn
	js  jetstream.JetStream
	url string // the external server's URL, credentials hidden
	// jetStream: chatpulse's streams are JetStream's (Options.JetStream).
	jetStream bool

	events     atomic.Pointer[nats.Subscription] // the core subscription to events, if any
	dropped    atomic.Uint64                     // events its client dropped
	droppedLog logEvery

	dead     deadLetters
	alerts   atomic.Pointer[alertStream] // nil: alerts go to AlertSubject at once
	replaced atomic.Uint64               // feed consumers replaced (Feed.watch)
	lost     atomic.Uint64               // connections lost
}

// ConsumersReplaced is how many feed consumers were replaced for
// delivering nothing after an error or a lost connection: after a NATS
// node loss (Feed.watch).
func (b *Bus) ConsumersReplaced() uint64 { return b.replaced.Load() }

// Open starts the embedded server, or connects to o.URL. With an external
// server the connection reconnects forever, buffering what is published
// meanwhile.
func Open(o Options) (*Bus, error) {
	b := &Bus{log: o.Log, jetStream: o.JetStream}
	if b.log == nil {
		b.log = slog.Default()
	}
	// The handlers below may run as soon as nats.Connect returns, so they
	// read only what b holds already or guards itself.
	opts := []nats.Option{
		nats.Name("chatpulse"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
		nats.ErrorHandler(b.asyncError),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.lost.Add(1)
			if err != nil {
				b.log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { b.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
	if o.URL != "" {
		b.url = redact(o.URL)
		if o.Creds != "" {
			opts = append(opts, nats.UserCredentials(o.Creds))
		}
		nc, err := nats.Connect(o.URL, opts...)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", b.url, err)
		}
		b.nc = nc
		js, _ := jetstream.New(nc) // only bad options fail
		b.js = placing{js, b.log}
		return b, b.startDeadLetters(o.JetStream)
	}
	port := o.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "chatpulse",
		Host:       o.Host,
		Port:       port,
		JetStream:  o.JetStream,
		StoreDir:   o.DataDir,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	fatal := make(chan string, 1)
	ns.SetLoggerV2(natsLog{b.log, fatal}, false, false, false)
	start := time.Now()
	go ns.Start()
	// After an unclean stop the server rebuilds its streams' state from
	// every message block before it listens: seconds for millions of
	// messages, which are waited for; a failure is not.
	for said := start; !ns.ReadyForConnections(250 * time.Millisecond); {
		select {
		case why := <-fatal:
			ns.Shutdown()
			return nil, fmt.Errorf("embedded NATS did not start on %s:%d: %s", o.Host, o.Port, why)
		default:
		}
		if time.Since(said) >= 10*time.Second {
			b.log.Info("embedded NATS still starting: recovering its store", "seconds", time.Since(start).Seconds())
			said = time.Now()
		}
	}
	if took := time.Since(start); took >= time.Second { // a recovery; a start takes milliseconds
		b.log.Info("embedded NATS ready", "seconds", took.Seconds())
	}
	nc, err := nats.Connect("", append(opts, nats.InProcessServer(ns))...)
	if err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	b.ns, b.nc = ns, nc
	js, _ := jetstream.New(nc)
	b.js = placing{js, b.log}
	return b, b.startDeadLetters(o.JetStream)
}

// startDeadLetters sets up the dead-letter publisher, or closes all.
func (b *Bus) startDeadLetters(jetStream bool) error {
	if err := b.dead.start(b.nc, jetStream, b.log); err != nil {
		b.Close()
		return fmt.Errorf("dead letters: %w", err)
	}
	return nil
}

// PublishURL is the NATS URL publishers should use (credentials hidden).
func (b *Bus) PublishURL() string {
	if b.ns != nil {
		return b.ns.ClientURL()
	}
	return b.url
}

// Publish sends data on subject, as any chat server would.
func (b *Bus) Publish(subject string, data []byte) error { return b.nc.Publish(subject, data) }

// Dropped is the number of events the core subscription's client dropped
// because chatpulse fell behind.
func (b *Bus) Dropped() uint64 { return b.dropped.Load() }

// asyncError is the connection's error handler. A slow consumer on the
// events subscription means the client dropped events: they are counted,
// and logged at most every 10 seconds.
func (b *Bus) asyncError(_ *nats.Conn, sub *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrSlowConsumer) || sub == nil || sub != b.events.Load() {
		b.log.Warn("nats", "err", err)
		return
	}
	n, derr := sub.Dropped()
	if derr != nil {
		return
	}
	b.dropped.Store(uint64(n)) // the subscription's count so far
	if b.droppedLog.due(10 * time.Second) {
		b.log.Warn("slow consumer: NATS dropped messages because chatpulse fell behind", "subject", sub.Subject, "dropped_total", n)
	}
}

// DeadLetterFailed is the number of dead letters that were not kept: not
// sent, refused by the dead-letter stream, or not acked in time.
func (b *Bus) DeadLetterFailed() uint64 { return b.dead.failed.Load() }

// Close waits for the acks of the dead letters and alerts still outstanding, closes
// the connection, then stops the embedded server.
func (b *Bus) Close() {
	b.dead.flush()
	b.flushAlerts()
	b.nc.Close()
	if b.ns != nil {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
	}
}

// redact hides a password or token in a URL for logs.
func redact(url string) string {
	if i, j := strings.Index(url, "://"), strings.LastIndex(url, "@"); i >= 0 && j > i {
		return url[:i+3] + "***" + url[j:]
	}
	return url
}

// natsLog sends the embedded server's warnings and errors to slog.
// natsLog is the embedded server's logger; fatal hears its fatal errors.
type natsLog struct {
	l     *slog.Logger
	fatal chan<- string
}

func (n natsLog) Noticef(format string, v ...any) { n.l.Debug("nats: " + fmt.Sprintf(format, v...)) }
func (n natsLog) Warnf(format string, v ...any)   { n.l.Warn("nats: " + fmt.Sprintf(format, v...)) }
func (n natsLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	n.l.Error("nats: " + msg)
	select {
	case n.fatal <- msg:
	default:
	}
}
func (n natsLog) Errorf(format string, v ...any) { n.l.Error("nats: " + fmt.Sprintf(format, v...)) }
func (n natsLog) Debugf(format string, v ...any) {}
func (n natsLog) Tracef(format string, v ...any) {}
