package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/internal/dendrite"
)

// dendrite measures, against a real Dendrite on chatbench's NATS server,
// the time from a client's send returning to the message showing in its
// room's view in chatpulse (GET /api/v1/rooms/{room}, polled every 0.2 ms
// meanwhile), one message at a time: negative when it showed first
// (Dendrite publishes the event on NATS before it answers the client).
// chatpulse reads Dendrite's stream as docs/input.md sets it up. Dendrite
// must be installed (dendrite.Install).
func dendriteCmd(args []string) error {
	fs := flag.NewFlagSet("dendrite", flag.ExitOnError)
	n := fs.Int("n", 300, "messages, sent one at a time")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	fs.Parse(args)
	mb, err := startMatrix("dendrite", bin)
	if err != nil {
		return err
	}
	defer mb.stop()
	hs := mb.hs
	p, err := mb.chatpulse()
	if err != nil {
		return err
	}
	defer p.stop()
	alice, err := hs.Register("alice")
	if err != nil {
		return err
	}
	room, err := hs.CreateRoom(alice, "latency")
	if err != nil {
		return err
	}

	// A poller notes when the view first shows each count, while the
	// sends go one after another: a message can show before its send
	// returns.
	view := p.url + "/api/v1/rooms/" + url.PathEscape(room) + "?window=1h"
	shown := make([]time.Time, *n+1)
	polled := make(chan error, 1)
	go func() {
		client := &http.Client{}
		for seen := int64(0); seen < int64(*n); {
			var v aggregator.Room
			resp, err := client.Get(view)
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&v)
				resp.Body.Close()
			}
			if err != nil {
				polled <- err
				return
			}
			for m := min(v.Messages, int64(*n)); seen < m; seen++ {
				shown[seen+1] = time.Now()
			}
			time.Sleep(200 * time.Microsecond)
		}
		polled <- nil
	}()
	started, returned := make([]time.Time, *n+1), make([]time.Time, *n+1)
	for i := 1; i <= *n; i++ {
		started[i] = time.Now()
		if _, err := hs.Send(alice, room, "m.room.message", map[string]any{"msgtype": "m.text", "body": fmt.Sprintf("message %d", i)}); err != nil {
			return err
		}
		returned[i] = time.Now()
	}
	select {
	case err := <-polled:
		if err != nil {
			return err
		}
	case <-time.After(30 * time.Second):
		return fmt.Errorf("not every message showed within 30 s")
	}

	after, whole, before := make([]time.Duration, 0, *n), make([]time.Duration, 0, *n), 0
	for i := 1; i <= *n; i++ {
		after, whole = append(after, shown[i].Sub(returned[i])), append(whole, shown[i].Sub(started[i]))
		if shown[i].Before(returned[i]) {
			before++
		}
	}
	a, w := percentiles(after, 0.50, 0.99, 1), percentiles(whole, 0.50, 0.99, 1)
	for i := range a {
		a[i], w[i] = a[i].Round(time.Microsecond), w[i].Round(time.Microsecond)
	}
	fmt.Printf("%d messages, one at a time.\n", *n)
	fmt.Printf("send returned -> shown in the room view: p50 %v, p99 %v, max %v (%d of %d shown before the send returned)\n", a[0], a[1], a[2], before, *n)
	fmt.Printf("send started -> shown in the room view:  p50 %v, p99 %v, max %v\n", w[0], w[1], w[2])
	return nil
}

// matrixBench is a NATS server and a real Dendrite on it, and chatbench's
// connection to them: what the commands that measure chatpulse on a
// Matrix homeserver share.
type matrixBench struct {
	dir, bin, natsURL string
	hs                *dendrite.Server
	nc                *nats.Conn
	js                jetstream.JetStream
	own               int // Dendrite's own consumers of its stream
	done              func()
}

// startMatrix starts a NATS server and Dendrite for the command name,
// building chatpulse unless *bin names a binary. Dendrite must be
// installed (dendrite.Install).
func startMatrix(name string, bin *string) (*matrixBench, error) {
	tools, err := dendrite.Find()
	if err != nil {
		return nil, err
	}
	dir, natsURL, done, err := setUp(name, bin)
	if err != nil {
		return nil, err
	}
	mb := &matrixBench{dir: dir, bin: *bin, natsURL: natsURL, done: done}
	if mb.hs, err = dendrite.Start(tools, filepath.Join(dir, "dendrite"), natsURL, nil); err != nil {
		done()
		return nil, err
	}
	if mb.nc, mb.js, err = connectJS(natsURL, "chatbench "+name); err == nil {
		mb.own, err = dendrite.Streamed(mb.js)
	}
	if err != nil {
		mb.stop()
		return nil, err
	}
	return mb, nil
}

func (mb *matrixBench) stop() {
	if mb.nc != nil {
		mb.nc.Close()
	}
	mb.hs.Stop()
	mb.done()
}

// chatpulse starts chatpulse reading Dendrite's stream as docs/input.md
// sets it up, with args besides, and returns once its stream sources
// Dendrite's: no room event may come before.
func (mb *matrixBench) chatpulse(args ...string) (*process, error) {
	p, err := startChatpulse(mb.bin, mb.dir, append([]string{"--nats-url", mb.natsURL, "--input", "matrix", "--source-stream", dendrite.Stream, "--stream", "CHAT_MATRIX"}, args...)...)
	if err != nil {
		return nil, err
	}
	if err := dendrite.Sourced(mb.js, mb.own); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}
