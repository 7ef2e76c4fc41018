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
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/group"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/snapshot"
	"github.com/chatpulse/chatpulse/throttle"
	"github.com/chatpulse/chatpulse/traffic"
	"github.com/chatpulse/chatpulse/web"
)

// Main is the program: ParseFlags, then Run, then Close.
type Main struct {
	Config Config
	Log    *slog.Logger
	Stderr io.Writer
	Now    func() time.Time

	agg       *aggregator.Aggregator // standalone
	thr       *throttle.Set          // standalone
	member    *group.Member          // in a group
	sink      *ingest.Sink           // standalone: the aggregator and the throttle set
	keeper    *snapshot.Keeper       // nil: no snapshots
	policies  *policies              // in force, and where new versions come from
	reg       *prometheus.Registry
	consumer  *ingest.Consumer
	web       *web.Server
	bus       *bus.Bus
	source    *bus.Source
	replaying bool // the source begins with a replay
	consuming bool // the consumer was started
	svc       micro.Service
	http      *http.Server
	httpAddr  net.Addr
	stop      chan struct{} // ends the hub, the janitor and the demo
	wg        sync.WaitGroup
	closed    bool

	tls *tls.Config // nil: plain HTTP
	// httpTimeouts are defaultHTTPTimeouts; tests shorten them.
	httpTimeouts httpTimeouts
	// policyPoll is how often a policies file is looked at (0: only on
	// SIGHUP, for tests).
	policyPoll time.Duration
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
// runs yet. Standalone, that is one aggregator and one throttle set fed by
// one consumer; in a group, a member that holds partitions of them.
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
	thr, err := throttle.NewSet(policies)
	if err != nil {
		return &UsageError{fmt.Errorf("--policies: %w", err)}
	}
	if m.tls, err = loadTLS(c); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	m.reg = reg
	m.policies = newPolicies(src, policies, m.Now, m.Log, reg)
	m.policies.apply = m.applyPolicies
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "chatpulse_deadletter_failed_total",
		Help: "Dead letters not kept: not sent, refused by the dead-letter stream, or not acked in time.",
	}, func() float64 { return float64(m.bus.DeadLetterFailed()) }))
	opts := web.Options{
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
	}
	deadLetter := func(msg *ingest.Msg, err *ingest.Error) { m.bus.DeadLetter(msg, err) }
	var stats stats
	if c.Group != "" {
		m.member, err = group.New(group.Config{
			Group: c.Group, Instance: c.Instance, Partitions: c.Partitions, Replicas: c.Replicas,
			Stream: c.Stream, Subject: c.Subject, Windows: c.Windows, MaxSkew: c.MaxSkew, Policies: policies,
			SnapshotInterval: c.SnapshotInterval, Now: m.Now, Log: m.Log,
		}, reg, deadLetter, func(a throttle.Alert) { m.bus.Alert(a) }) // dashboards hear it back from NATS
		if err != nil {
			return &UsageError{err}
		}
		stats = m.member
		opts.Ready = m.member.Ready
		opts.Group = func() any { return m.member.Status() }
		m.web = web.New(m.member, m.member, opts)
	} else {
		m.thr = thr
		if m.agg, err = aggregator.New(c.Windows); err != nil {
			return &UsageError{err}
		}
		stats = standalone{m.agg, m.thr}
		m.sink = &ingest.Sink{Agg: m.agg, Thr: m.thr}
		m.consumer = ingest.New(m.sink, reg, ingest.Config{
			Own:      bus.OwnPrefix,
			MaxSkew:  c.MaxSkew,
			Now:      m.Now,
			Log:      m.Log,
			OnReject: deadLetter,
			OnAlert:  m.alert,
		})
		opts.Ready = m.consumer.Ready
		m.web = web.New(m.agg, m.thr, opts)
	}
	reg.MustRegister(newStatsCollector(stats, names(c.Windows), m.policies.decisionLabels, func() uint64 { return m.bus.Dropped() }))
	reg.MustRegister(readyGauge(opts.Ready))
	return nil
}

func names(ws []rolling.Window) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Name
	}
	return out
}

// attach takes the HTTP address and connects to NATS (starting the
// embedded server), subscribing to the events, or joining the group.
func (m *Main) attach(ctx context.Context) (net.Listener, error) {
	c := &m.Config
	// The HTTP address first: a taken one is the commonest mistake.
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return nil, usagef("--http %s: %v", c.HTTP, err)
	}
	m.httpAddr = ln.Addr()
	if err := m.connect(); err != nil {
		ln.Close()
		return nil, err
	}
	if err := m.kvPolicies(ctx); err != nil {
		ln.Close()
		return nil, err
	}
	switch {
	case m.member != nil:
		err = m.member.Join(ctx, m.bus, m.HTTPURL())
		if errors.Is(err, group.ErrConfig) {
			err = &UsageError{err}
		}
	case c.JetStream:
		largest := largest(c)
		sc := bus.StreamConfig{
			Stream:   c.Stream,
			Subject:  c.Subject,
			MaxAge:   largest + c.MaxSkew + streamMaxAgeMargin,
			Replicas: c.Replicas,
			// One largest window (plus the skew a ts may have over its
			// publish time) before now: everything any window can still
			// hold. A snapshot, if there is one, covers the start.
			From: m.Now().Add(-largest - c.MaxSkew),
		}
		if sc.FromSeq, err = m.restore(ctx, sc); err == nil {
			m.source, m.replaying, err = m.bus.Stream(ctx, sc)
		}
	default:
		m.source, err = m.bus.Subscribe(c.Subject)
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// streamMaxAgeMargin is how much longer than the largest window (and the
// skew) a stream chatpulse creates keeps events.
const streamMaxAgeMargin = 10 * time.Minute

// open serves HTTP and NATS requests and starts consuming.
func (m *Main) open(ln net.Listener) error {
	c := &m.Config
	var err error
	handlers := map[string]bus.Handler{}
	for name, h := range m.web.Requests() {
		handlers[name] = h
	}
	if m.svc, err = m.bus.Serve(handlers); err != nil {
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
	if m.keeper != nil {
		m.goRun(m.snapshots)
	}
	if m.member != nil {
		if _, err := m.bus.SubscribeAlerts(m.web.Alert); err != nil {
			return fmt.Errorf("alerts: %w", err)
		}
		if err := m.member.Run(context.Background()); err != nil {
			return err
		}
	} else {
		m.consumer.Start(m.source, m.replaying)
	}
	m.consuming = true

	m.Log.Info("chatpulse is running",
		"dashboard", m.HTTPURL()+"/",
		"nats", m.PublishURL(),
		"subject", c.Subject,
		"publish_example", fmt.Sprintf(`nats --server %s pub chat.lobby.alice '{"room":"lobby","user":"alice","text":"hi"}'`, m.PublishURL()))
	if c.Demo {
		m.goRun(m.demo)
	}
	return nil
}

func largest(c *Config) time.Duration {
	var l time.Duration
	for _, w := range c.Windows {
		l = max(l, w.Size)
	}
	return l
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

// alert publishes a throttle alert on NATS and to every dashboard.
func (m *Main) alert(a throttle.Alert) {
	m.bus.Alert(a)
	m.web.Alert(a)
	if m.Log.Enabled(context.Background(), slog.LevelDebug) { // the arguments alone cost allocations
		m.Log.Debug("throttle alert", "policy", a.Policy, "room", a.Room, "user", a.User, "count", a.Count, "limit", a.Limit)
	}
}

// janitor frees what expired even when no traffic or reads come by.
// Counts are right without it.
func (m *Main) janitor() {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			now := m.Now().UnixMilli()
			if m.member != nil {
				m.member.Sweep(now)
				continue
			}
			m.agg.Advance(now)
			m.thr.Sweep(now)
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
	switch {
	case m.member != nil && m.consuming:
		errs = append(errs, m.member.Close(ctx))
	case m.source != nil:
		m.source.Stop()
		if m.consuming {
			errs = append(errs, m.consumer.Wait(ctx))
			m.lastSnapshot(ctx)
		}
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
