package proxy

import (
	"io"
	"net"
	"testing"
)

// What is written through a stalled proxy arrives once it resumes; a
// dropped connection is closed, and a new one is forwarded; while the
// proxy refuses, a new connection is closed at once and the ones it
// forwards already go on.
func TestStallResumeDropRefuse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	p := New(t, ln.Addr().String())
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	echo := func(c net.Conn, s string) error {
		if _, err := c.Write([]byte(s)); err != nil {
			return err
		}
		buf := make([]byte, len(s))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != s {
			t.Errorf("echoed %q, want %q", buf, s)
		}
		return nil
	}
	c := dial()
	if err := echo(c, "one"); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	if _, err := c.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	p.Resume()
	buf := make([]byte, 3)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "two" {
		t.Fatalf("after a stall: %q, %v; want two", buf, err)
	}
	p.Drop()
	if _, err := io.ReadFull(c, buf); err == nil {
		t.Error("a dropped connection still reads")
	}
	c = dial()
	if err := echo(c, "three"); err != nil {
		t.Fatalf("a connection after a drop: %v", err)
	}
	p.Refuse(true)
	if err := echo(dial(), "four"); err == nil {
		t.Error("a connection made while the proxy refuses is forwarded")
	}
	if err := echo(c, "five"); err != nil {
		t.Fatalf("a connection forwarded before the refusal: %v", err)
	}
	p.Refuse(false)
	if err := echo(dial(), "six"); err != nil {
		t.Fatalf("a connection after the refusal ends: %v", err)
	}
}
