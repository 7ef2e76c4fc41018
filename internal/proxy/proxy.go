// Package proxy is a TCP proxy for tests that cut a client off its server
// without touching either: it forwards every connection to one address
// and, on demand, stalls the traffic both ways (a network that stops
// delivering, a paused peer), drops every connection (a cut cable), or
// refuses new ones (a server gone, or restarting).
//
// It is for tests only: nothing of chatpulse imports it.
package proxy

import (
	"net"
	"sync"
	"testing"
)

// A Proxy forwards the connections made to Addr to its target.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	resumed  chan struct{} // nil: flowing; else closed when a stall ends
	refusing bool
}

// New starts a proxy to target on a free local port; it stops when the
// test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is where to connect: host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stall holds every byte, both ways, on every connection, until Resume:
// nothing is lost, nothing arrives, no connection closes.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		p.resumed = make(chan struct{})
	}
}

// Resume lets what Stall held go on.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
}

// Drop closes every connection; new ones are forwarded again, unless the
// proxy refuses them.
func (p *Proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Refuse makes the proxy close each new connection at once (on) or
// forward it again (off). The connections it forwards already stay:
// Drop cuts them.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = on
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Refuse(true)
	p.Resume()
	p.Drop()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		// Checked with the connection kept under one lock, so that a
		// Refuse and Drop pair leaves nothing open.
		p.mu.Lock()
		if p.refusing {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies from src to dst, waiting out stalls before each write;
// when either side ends, both close.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.forget(src, dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			p.gate() // nor does a close get through a stall
			return
		}
	}
}

// forget closes a pair of connections that ended.
func (p *Proxy) forget(a, b net.Conn) {
	a.Close()
	b.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, a)
	delete(p.conns, b)
}

// gate waits while the proxy is stalled.
func (p *Proxy) gate() {
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}
