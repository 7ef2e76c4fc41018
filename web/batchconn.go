package web

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// batchConn is a websocket's network connection with its writes gathered:
// gorilla/websocket writes each frame with a write of its own, and a write
// to a socket is a system call (about 70 µs of system time on our VM), so
// while the writer sends a client's pending frames they go to a buffer,
// and the buffer goes to the network in one write. Outside that, writes go
// straight through: the reader's pongs and close frames, and pings.
type batchConn struct {
	net.Conn
	mu  sync.Mutex
	buf *[]byte // non-nil while gathering
}

// batchBufs are the buffers of gathered writes; an idle client holds none.
var batchBufs = sync.Pool{New: func() any { return new([]byte) }}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return b.Conn.Write(p)
	}
	*b.buf = append(*b.buf, p...)
	return len(p), nil
}

// gather starts gathering writes.
func (b *batchConn) gather() {
	b.mu.Lock()
	b.buf = batchBufs.Get().(*[]byte)
	b.mu.Unlock()
}

// flush writes what was gathered, under the last write deadline set, and
// stops gathering.
func (b *batchConn) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	buf := b.buf
	b.buf = nil
	_, err := b.Conn.Write(*buf)
	*buf = (*buf)[:0]
	batchBufs.Put(buf)
	return err
}

// hijackWriter hands the websocket upgrader the connection as a batchConn.
type hijackWriter struct {
	http.ResponseWriter
	conn *batchConn // once hijacked
}

func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &batchConn{Conn: c}
	return w.conn, rw, nil
}
