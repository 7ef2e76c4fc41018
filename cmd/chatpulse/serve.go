package main

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// httpTimeouts bound how long one connection can hold the HTTP server, so
// that slow or idle clients cannot keep connections (and their goroutines
// and buffers) forever. A websocket is on its own once upgraded: the hub
// keeps it with pings and deadlines of its own.
type httpTimeouts struct {
	readHeader time.Duration // from accept to the end of the headers: slowloris
	read       time.Duration // the whole request, body included: a slow body
	write      time.Duration // from the end of the headers to the end of the answer: a slow reader
	idle       time.Duration // a keep-alive connection between requests
}

// defaultHTTPTimeouts are generous for any real client: a check body is at
// most 64 KiB and the largest answer (1,000 rooms) about 100 KiB.
var defaultHTTPTimeouts = httpTimeouts{
	readHeader: 5 * time.Second,
	read:       30 * time.Second,
	write:      30 * time.Second,
	idle:       60 * time.Second,
}

// maxHeaderBytes is the most a request's headers may take (the default
// is 1 MiB; chatpulse's requests need a few hundred bytes).
const maxHeaderBytes = 64 << 10

// httpServer is the HTTP server over the web server, with m's timeouts,
// and with TLS if so configured.
func (m *Main) httpServer() *http.Server {
	t := m.httpTimeouts
	return &http.Server{
		Handler:           m.web,
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
		MaxHeaderBytes:    maxHeaderBytes,
		TLSConfig:         m.tls,
		// What the server itself reports is mostly noise from the network
		// (failed TLS handshakes from scanners): debug.
		ErrorLog: slog.NewLogLogger(m.Log.Handler(), slog.LevelDebug),
	}
}

// serveHTTP serves on ln until the server is shut down.
func (m *Main) serveHTTP(ln net.Listener) {
	var err error
	if m.http.TLSConfig != nil {
		err = m.http.ServeTLS(ln, "", "")
	} else {
		err = m.http.Serve(ln)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		m.Log.Error("http", "err", err)
	}
}

// loadTLS loads --tls-cert and --tls-key: nil without them.
func loadTLS(c *Config) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, usagef("--tls-cert, --tls-key: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// allowedHosts are the names requests may carry in Host: --allowed-hosts,
// and the host of --http when it is a name.
func allowedHosts(c *Config) []string {
	hosts := c.AllowedHosts
	if host, _, err := net.SplitHostPort(c.HTTP); err == nil && host != "" && net.ParseIP(host) == nil {
		hosts = append(hosts, host)
	}
	return hosts
}
