package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

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
	tools, err := dendrite.Find()
	if err != nil {
		return err
	}
	dir, natsURL, done, err := setUp("dendrite", bin)
	if err != nil {
		return err
	}
	defer done()
	hs, err := dendrite.Start(tools, filepath.Join(dir, "dendrite"), natsURL, nil)
	if err != nil {
		return err
	}
	defer hs.Stop()
	nc, js, err := connectJS(natsURL, "chatbench dendrite")
	if err != nil {
		return err
	}
	defer nc.Close()
	own, err := dendrite.Streamed(js)
	if err != nil {
		return err
	}
	p, err := startChatpulse(*bin, dir, "--nats-url", natsURL, "--input", "matrix", "--source-stream", dendrite.Stream, "--stream", "CHAT_MATRIX")
	if err != nil {
		return err
	}
	defer p.stop()
	if err := dendrite.Sourced(js, own); err != nil {
		return err
	}
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
