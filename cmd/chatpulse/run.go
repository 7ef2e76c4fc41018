package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
	"github.com/chatpulse/chatpulse/traffic"
	"github.com/chatpulse/chatpulse/web"
)

// AlertSubject is where throttle alerts are published.
const AlertSubject = "chatpulse.alerts.throttle"

// Main is the program: ParseFlags, then Run, then Close.
type Main struct {
	Config Config
	Log    *slog.Logger
	Stderr io.Writer
	Now    func() time.Time

	ns       *server.Server
	nc       *nats.Conn
	agg      *aggregator.Aggregator
	thr      *throttle.Set
	consumer *ingest.Consumer
	web      *web.Server
	svc      micro.Service
	http     *http.Server
	httpAddr net.Addr
	stop     chan struct{} // ends the hub, the janitor and the demo
	wg       sync.WaitGroup
	closed   bool
}

// NewMain returns a Main with the default configuration.
func NewMain() *Main {
	return &Main{
		Log:    slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Stderr: os.Stderr,
		Now:    time.Now,
		stop:   make(chan struct{}),
	}
}

// Run starts everything and returns once chatpulse is serving (the replay
// may still be running: see /readyz).
func (m *Main) Run(ctx context.Context) error {
	c := &m.Config
	if len(c.Windows) == 0 {
		return usagef("no windows configured (call ParseFlags first)")
	}
	policies := throttle.DefaultPolicies()
	if c.Policies != "" {
		p, err := throttle.LoadPolicies(c.Policies)
		if err != nil {
			return &UsageError{fmt.Errorf("--policies: %w", err)}
		}
		policies = p
	}
	var err error
	if m.thr, err = throttle.NewSet(policies); err != nil {
		return &UsageError{fmt.Errorf("--policies: %w", err)}
	}
	if m.agg, err = aggregator.New(c.Windows); err != nil {
		return &UsageError{err}
	}

	// Listen for HTTP first: a taken address is the commonest mistake.
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return usagef("--http %s: %v", c.HTTP, err)
	}
	m.httpAddr = ln.Addr()

	if err := m.connect(ctx); err != nil {
		ln.Close()
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(newStatsCollector(m.agg, m.thr))

	m.web = web.New(m.agg, m.thr, web.Options{
		Now:            m.Now,
		Gatherer:       reg,
		Registerer:     reg,
		Log:            m.Log,
		PushInterval:   c.PushInterval,
		AllowedOrigins: c.AllowedOrigins,
		Ready:          func() bool { return m.consumer != nil && m.consumer.Ready() },
	})
	m.http = &http.Server{Handler: m.web, ReadHeaderTimeout: 10 * time.Second}
	m.goRun(func() {
		if err := m.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.Log.Error("http", "err", err)
		}
	})
	m.goRun(func() { m.web.Hub.Run(m.stop) })
	m.goRun(m.janitor)

	if m.svc, err = m.web.StartMicro(m.nc); err != nil {
		return fmt.Errorf("throttle service: %w", err)
	}

	m.consumer = ingest.New(m.nc, m.agg, m.thr, reg, ingest.Config{
		Subject:   c.Subject,
		JetStream: c.JetStream,
		Stream:    c.Stream,
		Replay:    largest(c),
		MaxSkew:   c.MaxSkew,
		Now:       m.Now,
		Log:       m.Log,
		OnAlert:   m.alert,
	})
	if err := m.consumer.Start(ctx); err != nil {
		return err
	}

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
func (m *Main) connect(ctx context.Context) error {
	c := &m.Config
	opts := []nats.Option{
		nats.Name("chatpulse"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) && sub != nil && m.consumer != nil {
				m.consumer.SlowConsumer(sub)
				return
			}
			m.Log.Warn("nats", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				m.Log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { m.Log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
	if c.NATSURL != "" {
		if c.NATSCreds != "" {
			opts = append(opts, nats.UserCredentials(c.NATSCreds))
		}
		nc, err := nats.Connect(c.NATSURL, opts...)
		if err != nil {
			return fmt.Errorf("connect to NATS at %s: %w", redact(c.NATSURL), err)
		}
		m.nc = nc
		return nil
	}
	if err := m.startNATS(); err != nil {
		return err
	}
	nc, err := nats.Connect("", append(opts, nats.InProcessServer(m.ns))...)
	if err != nil {
		return fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	m.nc = nc
	return nil
}

// startNATS starts the embedded server, with JetStream in --data-dir.
func (m *Main) startNATS() error {
	c := &m.Config
	host, portText, err := net.SplitHostPort(c.NATSListen)
	if err != nil {
		return usagef("--nats-listen %s: %v", c.NATSListen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return usagef("--nats-listen %s: bad port", c.NATSListen)
	}
	if port == 0 {
		port = server.RANDOM_PORT // as for --http, 0 means any free port
	} else {
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
	ns, err := server.NewServer(&server.Options{
		ServerName: "chatpulse",
		Host:       host,
		Port:       port,
		JetStream:  c.JetStream,
		StoreDir:   c.DataDir,
		NoSigs:     true,
	})
	if err != nil {
		return fmt.Errorf("embedded NATS: %w", err)
	}
	ns.SetLoggerV2(natsLog{m.Log}, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return fmt.Errorf("embedded NATS did not start on %s", c.NATSListen)
	}
	m.ns = ns
	return nil
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

// alert publishes a throttle alert on NATS and to every dashboard. Every
// instance reading the same stream raises the same alerts, so each carries
// a Nats-Msg-Id naming the crossing: a JetStream stream that captures
// chatpulse.alerts.> keeps one of each.
func (m *Main) alert(a throttle.Alert) {
	if b, err := json.Marshal(a); err == nil {
		msg := nats.NewMsg(AlertSubject)
		msg.Data = b
		msg.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s|%q|%q|%d", a.Policy, a.Room, a.User, int64(a.At)))
		if err := m.nc.PublishMsg(msg); err != nil {
			m.Log.Warn("alert not published", "err", err)
		}
	}
	m.web.Hub.Alert(a)
	m.Log.Debug("throttle alert", "policy", a.Policy, "room", a.Room, "user", a.User, "count", a.Count, "limit", a.Limit)
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
	if _, err := g.Run(ctx, func(subject string, data []byte) error { return m.nc.Publish(subject, data) }); err != nil && !errors.Is(err, context.Canceled) {
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
	return "http://" + net.JoinHostPort(host, port)
}

// PublishURL is the NATS URL publishers should use.
func (m *Main) PublishURL() string {
	if m.ns != nil {
		return m.ns.ClientURL()
	}
	return redact(m.Config.NATSURL)
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
	if m.consumer != nil {
		errs = append(errs, m.consumer.Stop(ctx))
	}
	if m.svc != nil {
		errs = append(errs, m.svc.Stop())
	}
	if m.http != nil {
		errs = append(errs, m.http.Shutdown(ctx))
	}
	m.wg.Wait()
	if m.nc != nil {
		m.nc.Close()
	}
	if m.ns != nil {
		m.ns.Shutdown()
		m.ns.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// redact hides a password or token in a URL for logs.
func redact(url string) string {
	if i, j := strings.Index(url, "://"), strings.LastIndex(url, "@"); i >= 0 && j > i {
		return url[:i+3] + "***" + url[j:]
	}
	return url
}

// natsLog sends the embedded server's warnings and errors to slog.
type natsLog struct{ l *slog.Logger }

func (n natsLog) Noticef(format string, v ...any) { n.l.Debug("nats: " + fmt.Sprintf(format, v...)) }
func (n natsLog) Warnf(format string, v ...any)   { n.l.Warn("nats: " + fmt.Sprintf(format, v...)) }
func (n natsLog) Fatalf(format string, v ...any)  { n.l.Error("nats: " + fmt.Sprintf(format, v...)) }
func (n natsLog) Errorf(format string, v ...any)  { n.l.Error("nats: " + fmt.Sprintf(format, v...)) }
func (n natsLog) Debugf(format string, v ...any)  {}
func (n natsLog) Tracef(format string, v ...any)  {}
