package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
)

// fanout connects many websocket clients to a running chatpulse, each
// subscribed to the overview, while events flow, and measures the delay
// from a view's as_of (when chatpulse computed it) to its arrival at each
// client, and what the clients cost chatpulse, from its /metrics.
func fanoutCmd(args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ExitOnError)
	base := fs.String("http", "http://127.0.0.1:8080", "chatpulse's HTTP address")
	url := fs.String("nats-url", nats.DefaultURL, "chatpulse's NATS")
	clients := fs.Int("clients", 1000, "websocket clients")
	events := fs.Float64("events", 2000, "chat events per second")
	d := fs.Duration("duration", 15*time.Second, "how long to measure once all are connected")
	fs.Parse(args)

	_, stop, err := chatter(*url, "chatbench-fanout", *events)
	if err != nil {
		return err
	}
	defer stop()
	time.Sleep(2 * time.Second) // traffic under way before the baseline

	before, err := scrape(*base + "/metrics")
	if err != nil {
		return err
	}
	wsURL := "ws" + strings.TrimPrefix(*base, "http") + "/ws"
	var (
		mu        sync.Mutex
		lags      []time.Duration
		frames    atomic.Int64
		bytes     atomic.Int64
		measuring atomic.Bool
		conns     []*websocket.Conn
		wg        sync.WaitGroup
	)
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	for i := range *clients {
		c, _, err := dialer.Dial(wsURL, nil)
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		conns = append(conns, c)
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","view":"overview"}`)); err != nil {
			return err
		}
		wg.Go(func() {
			var f struct {
				Type string `json:"type"`
				Data struct {
					AsOf time.Time `json:"as_of"`
				} `json:"data"`
			}
			for {
				_, b, err := c.ReadMessage()
				if err != nil {
					return
				}
				now := time.Now()
				if !measuring.Load() || json.Unmarshal(b, &f) != nil || f.Type != "view" {
					continue
				}
				frames.Add(1)
				bytes.Add(int64(len(b)))
				mu.Lock()
				lags = append(lags, now.Sub(f.Data.AsOf))
				mu.Unlock()
			}
		})
	}
	time.Sleep(2 * time.Second) // everyone has had their first view
	connected, err := scrape(*base + "/metrics")
	if err != nil {
		return err
	}
	measuring.Store(true)
	time.Sleep(*d)
	measuring.Store(false)
	after, err := scrape(*base + "/metrics")
	if err != nil {
		return err
	}
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()

	n := float64(*clients)
	p := percentiles(lags, 0.5, 0.99, 1)
	fmt.Printf("%d websocket clients on the overview, %.0f chat events/s, measured for %v\n\n", *clients, *events, *d)
	fmt.Printf("delivery lag (as_of to receipt): p50 %s  p99 %s  max %s  over %d frames\n", ms(p[0]), ms(p[1]), ms(p[2]), frames.Load())
	fmt.Printf("frames per client per second: %.2f   bytes per client per second: %.0f\n",
		float64(frames.Load())/n/d.Seconds(), float64(bytes.Load())/n/d.Seconds())
	mem := func(m map[string]float64) float64 {
		return m["go_memstats_heap_inuse_bytes"] + m["go_memstats_stack_inuse_bytes"]
	}
	fmt.Printf("chatpulse, per client: %.1f KiB heap and stacks in use, %.1f KiB resident, %.1f goroutines\n",
		(mem(connected)-mem(before))/n/1024,
		(connected["process_resident_memory_bytes"]-before["process_resident_memory_bytes"])/n/1024,
		(connected["go_goroutines"]-before["go_goroutines"])/n)
	fmt.Printf("chatpulse CPU while measuring: %.0f%% of one core (ws clients: %.0f)\n",
		100*(after["process_cpu_seconds_total"]-connected["process_cpu_seconds_total"])/d.Seconds(), connected["chatpulse_ws_clients"])
	return nil
}
