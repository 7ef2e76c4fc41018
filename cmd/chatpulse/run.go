package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/group"
	"github.com/chatpulse/chatpulse/moderation"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/standalone"
	"github.com/chatpulse/chatpulse/throttle"
	"github.com/chatpulse/chatpulse/traffic"
	"github.com/chatpulse/chatpulse/web"
)

// Main is the program: ParseFlags, then Run, then Close. It wires the
// parts together (flags, TLS, HTTP, the bus, web, the policies, the
// janitor) around the engine, which does the counting: standalone, or a
// member of a group with --group. It never asks which it has.
type Main struct {
	Config Config
	Log    *slog.Logger
	Stderr io.Writer
	Now    func() time.Time

	engine     engine.Engine
	policies   *policies          // in force, and where new versions come from
	moderation *engine.Moderation // the moderators' actions
	actor      *actor             // --act: acts on the chat system; nil without
	web        *web.Server
	bus        *bus.Bus
	svc        micro.Service
	http       *http.Server
	httpAddr   net.Addr
	stop       chan struct{} // ends the hub, the janitor and the demo
	wg         sync.WaitGroup
	closed     bool

	tls *tls.Config // nil: plain HTTP
	// httpTimeouts are defaultHTTPTimeouts; tests shorten them.
	httpTimeouts httpTimeouts
	// policyPoll is how often a policies file is looked at (0: only on
	// SIGHUP, for tests).
	policyPoll time.Duration
	// policyUnchanged counts the looks at a policies file that found it
	// as it was: what tests wait on, since such a look leaves no other
	// trace.
	policyUnchanged atomic.Int64
}

// NewMain returns a Main with the default configuration.
func NewMain() *Main {
	return &Main{
		Log:    slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Stderr: os.Stderr,
		Now:    time.Now,
		stop:   make(chan struct{}),

		httpTimeouts: defaultHTTPTimeouts,
		policyPoll:   policyPoll,
	}
}

// Run starts everything and returns once chatpulse is serving (the replay
// may still be running: see /readyz). It builds every part first, then
// attaches to the network (the HTTP port, NATS), and only then opens:
// serving HTTP and NATS requests and consuming events. So whatever a
// handler or callback reads exists before any of them can run.
func (m *Main) Run(ctx context.Context) error {
	if err := m.build(); err != nil {
		return err
	}
	ln, err := m.attach(ctx)
	if err != nil {
		return err
	}
	return m.open(ln)
}

// build makes the parts that hold state and wires them together; nothing
// runs yet.
func (m *Main) build() error {
	c := &m.Config
	if len(c.Windows) == 0 {
		return usagef("no windows configured (call ParseFlags first)")
	}
	src, err := parsePolicySource(c.Policies)
	if err != nil {
		return err
	}
	policies, err := loadPolicies(src)
	if err != nil {
		return err
	}
	if _, err := throttle.NewSet(policies); err != nil {
		return &UsageError{fmt.Errorf("--policies: %w", err)}
	}
	if m.tls, err = loadTLS(c); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	m.policies = newPolicies(src, policies, m.Now, m.Log, reg)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chatpulse_deadletter_failed_total",
		Help: "Dead letters not kept: not sent, refused by the dead-letter stream, or not acked in time.",
	}, func() float64 { return float64(m.bus.DeadLetterFailed()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chatpulse_alerts_failed_total",
		Help: "Alerts a group's alert stream did not take: not sent, or not acked in time (0 standalone).",
	}, func() float64 { return float64(m.bus.AlertFailed()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chatpulse_consumers_replaced_total",
		Help: "JetStream consumers of the events replaced for delivering nothing after an error or a lost connection (a NATS node lost).",
	}, func() float64 { return float64(m.bus.ConsumersReplaced()) }))
	m.moderation = engine.NewModeration(m.Now, m.Log)
	var onOver func(string, throttle.Over)
	if c.Act != "" {
		onOver = func(part string, o throttle.Over) { m.actor.Over(part, o) }
	}
	var parts parts
	if m.engine, parts, err = newEngine(c, policies, m.moderation.Book, onOver, m.Now, m.Log, reg); err != nil {
		return &UsageError{err}
	}
	if m.actor, err = m.newActor(reg, parts); err != nil {
		return err
	}
	m.policies.apply = m.engine.Reconfigure
	m.moderation.Settle = m.engine.Settle
	m.web = web.New(m.engine, m.engine, web.Options{
		Now:            m.Now,
		Gatherer:       reg,
		Registerer:     reg,
		Log:            m.Log,
		PushInterval:   c.PushInterval,
		AllowedOrigins: c.AllowedOrigins,
		AllowedHosts:   allowedHosts(c),
		AuthToken:      c.AuthToken,
		MetricsAuth:    c.MetricsAuth,
		Policies:       m.policies.answer,
		File:           m.file,
		Ready:          m.engine.Ready,
		Group:          m.engine.Status,
		Act:            m.actStatus,
		Moderation:     m.moderation,
		MaxName:        c.Input.MaxName(),
	})
	reg.MustRegister(newStatsCollector(m.engine, names(c.Windows), m.policies.decisionLabels, func() uint64 { return m.bus.Dropped() }))
	reg.MustRegister(readyGauge(m.engine.Ready))
	return nil
}

// parts say, in a group, which part of the work (a partition stage)
// decides for a room or a user, and which parts this member holds now:
// whose acts it undoes (docs/contract.md section 14). Standalone, both
// are nil: one instance does it all.
type parts struct {
	owns func(part string) bool
	of   func(room, user string) string // a room's stage if room is set, else the user's
}

// newEngine is the one place that knows there are two engines: a member
// of --group, or a standalone instance.
func newEngine(c *Config, policies []throttle.Policy, book *moderation.Book, onOver func(string, throttle.Over), now func() time.Time, log *slog.Logger, reg prometheus.Registerer) (engine.Engine, parts, error) {
	ec := engine.Config{
		Stream: c.Stream, Subject: c.Subject, SourceStream: c.SourceStream, Input: c.Input, JetStream: c.JetStream, Windows: c.Windows, MaxSkew: c.MaxSkew,
		Policies: policies, Book: book, Replicas: c.Replicas, Instance: c.Instance, SnapshotInterval: c.SnapshotInterval,
		OnOver: onOver, Now: now, Log: log,
	}
	if c.Group != "" {
		m, err := group.New(group.Config{Config: ec, Group: c.Group, Partitions: c.Partitions, Unowned: c.ThrottleUnowned}, reg)
		if err != nil {
			return nil, parts{}, err
		}
		return m, parts{owns: m.Holds, of: m.PartOf}, nil
	}
	e, err := standalone.New(ec, reg)
	if err != nil {
		return nil, parts{}, err
	}
	return e, parts{}, nil
}

func names(ws []rolling.Window) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Name
	}
	return out
}

// attach takes the HTTP address and connects to NATS (starting the
// embedded server), and attaches the engine to it.
func (m *Main) attach(ctx context.Context) (net.Listener, error) {
	c := &m.Config
	// The HTTP address first: a taken one is the commonest mistake.
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return nil, usagef("--http %s: %v", c.HTTP, err)
	}
	m.httpAddr = ln.Addr()
	if p, ok := m.engine.(interface{ Preload(dir string) }); ok && c.JetStream && c.NATSURL == "" {
		// The embedded server recovers its store meanwhile.
		p.Preload(filepath.Join(c.DataDir, "snapshots"))
	}
	if err := m.connect(); err != nil {
		ln.Close()
		return nil, err
	}
	if err := m.kvPolicies(ctx); err != nil {
		ln.Close()
		return nil, err
	}
	// The actions kept are in force before anything is checked.
	mctx, cancel := context.WithCancel(context.Background())
	m.goRun(func() { <-m.stop; cancel() })
	if err := m.moderation.Attach(mctx, m.bus, c.JetStream, c.Replicas); err != nil {
		ln.Close()
		return nil, err
	}
	if err := m.engine.Attach(ctx, m.bus, m.HTTPURL()); err != nil {
		ln.Close()
		if errors.Is(err, group.ErrConfig) || errors.Is(err, bus.ErrNotSourced) {
			return nil, &UsageError{err}
		}
		return nil, err
	}
	return ln, nil
}

// open serves HTTP and NATS requests and starts the engine.
func (m *Main) open(ln net.Listener) error {
	c := &m.Config
	var err error
	views := map[aggregator.View]bus.Handler{}
	for view, h := range m.web.Requests() {
		views[view] = h
	}
	if m.svc, err = m.bus.Serve(m.web.CheckRequest, views); err != nil {
		ln.Close()
		return fmt.Errorf("micro service: %w", err)
	}
	m.http = m.httpServer()
	m.goRun(func() { m.serveHTTP(ln) })
	m.goRun(func() { m.web.Run(m.stop) })
	m.goRun(m.janitor)
	if err := m.watchPolicies(); err != nil {
		return err
	}
	if err := m.engine.Run(m.web.Alert); err != nil {
		return err
	}
	if a := m.actor; a != nil {
		// The dashboards' moderation panel shows every act, live: in a
		// group, every member's.
		sub, err := m.bus.SubscribeActs(m.web.Acted)
		if err != nil {
			return fmt.Errorf("acts: %w", err)
		}
		m.goRun(func() { <-m.stop; sub.Unsubscribe() })
		ctx, cancel := context.WithCancel(context.Background())
		m.goRun(func() { <-m.stop; cancel() })
		m.goRun(func() { a.Run(ctx) })
		m.rereadToken(a)
		m.goRun(func() { m.timeouts(a) })
	}

	running := []any{"dashboard", m.HTTPURL() + "/", "nats", m.PublishURL(), "subject", c.Subject, "input", c.Input.Name()}
	if c.SourceStream != "" {
		running = append(running, "source_stream", c.SourceStream)
	}
	if c.Input == nil || c.Input.Native() {
		running = append(running, "publish_example", fmt.Sprintf(`nats --server %s pub chat.lobby.alice '{"room":"lobby","user":"alice","text":"hi"}'`, m.PublishURL()))
	}
	m.Log.Info("chatpulse is running", running...)
	if c.Demo {
		m.goRun(m.demo)
	}
	return nil
}

func (m *Main) goRun(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// connect starts the embedded NATS server, or connects to --nats-url.
func (m *Main) connect() error {
	c := &m.Config
	o := bus.Options{URL: c.NATSURL, Creds: c.NATSCreds, JetStream: c.JetStream, DataDir: c.DataDir, Log: m.Log}
	if c.NATSURL == "" {
		host, portText, err := net.SplitHostPort(c.NATSListen)
		if err != nil {
			return usagef("--nats-listen %s: %v", c.NATSListen, err)
		}
		port, err := strconv.Atoi(portText)
		if err != nil {
			return usagef("--nats-listen %s: bad port", c.NATSListen)
		}
		if port != 0 {
			// The server only says it cannot listen by not starting; ask first.
			ln, err := net.Listen("tcp", c.NATSListen)
			if err != nil {
				return usagef("--nats-listen %s: %v", c.NATSListen, err)
			}
			ln.Close()
		}
		if c.JetStream {
			if err := usableDir(c.DataDir); err != nil {
				return usagef("--data-dir %s: %v", c.DataDir, err)
			}
		}
		o.Host, o.Port = host, port
	}
	var err error
	m.bus, err = bus.Open(o)
	return err
}

// usableDir makes dir if needed and checks that it can hold files.
func usableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".chatpulse-probe-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// janitor frees what expired even when no traffic or reads come by.
// Counts are right without it.
func (m *Main) janitor() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-m.stop; cancel() }()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			now := m.Now().UnixMilli()
			m.engine.Sweep(now)
			m.moderation.Sweep(ctx, now) // each expiry with a deadline of its own
		}
	}
}

// demo publishes synthetic chat through NATS, like any chat server would.
func (m *Main) demo() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-m.stop; cancel() }()
	g := traffic.New(traffic.Demo())
	if _, err := g.Run(ctx, m.bus.Publish); err != nil && !errors.Is(err, context.Canceled) {
		m.Log.Warn("demo traffic stopped", "err", err)
	}
}

// HTTPURL is the base URL of the HTTP server.
func (m *Main) HTTPURL() string {
	if m.httpAddr == nil {
		return ""
	}
	host, port, _ := net.SplitHostPort(m.httpAddr.String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	scheme := "http://"
	if m.tls != nil {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port)
}

// PublishURL is the NATS URL publishers should use.
func (m *Main) PublishURL() string {
	if m.bus == nil {
		return ""
	}
	return m.bus.PublishURL()
}

// Close stops everything, in order: no more events in, what arrived is
// counted, then the servers go.
func (m *Main) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	close(m.stop)
	var errs []error
	if m.engine != nil {
		errs = append(errs, m.engine.Close(ctx))
	}
	if m.svc != nil {
		errs = append(errs, m.svc.Stop())
	}
	if m.http != nil {
		errs = append(errs, m.http.Shutdown(ctx))
	}
	m.wg.Wait()
	if m.bus != nil {
		m.bus.Close()
	}
	return errors.Join(errs...)
}
