package main

import (
	"bytes"
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
// subscribed to the overview (and, as the dashboard is, to alerts), while
// events flow, and measures the delay from a view's as_of (when chatpulse
// computed it) to its arrival at each client, and what the clients cost
// chatpulse, from its /metrics. Then, if Centrifugo is installed, the same
// clients do the same against it (started here, a 1.26 KB publication a
// second on one channel), as a baseline.
func fanoutCmd(args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ExitOnError)
	base := fs.String("http", "http://127.0.0.1:8080", "chatpulse's HTTP address")
	url := fs.String("nats-url", nats.DefaultURL, "chatpulse's NATS")
	clients := fs.Int("clients", 1000, "websocket clients")
	events := fs.Float64("events", 2000, "chat events per second")
	alerts := fs.Bool("alerts", true, "clients subscribe to alerts too, as the dashboard does")
	d := fs.Duration("duration", 15*time.Second, "how long to measure once all are connected")
	centrifugo := fs.String("centrifugo", "", "the centrifugo binary (default: on PATH or in $GOPATH/bin; \"none\" to skip)")
	cport := fs.Int("centrifugo-port", 18000, "port for Centrifugo")
	fs.Parse(args)

	_, stop, err := chatter(*url, "chatbench-fanout", "chat", *events)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // traffic under way before the baseline
	subs := []string{`{"type":"subscribe","view":"overview"}`}
	if *alerts {
		subs = append(subs, `{"type":"subscribe","view":"alerts"}`)
	}
	cp, err := measureFanout(fanoutTarget{
		name:    "chatpulse",
		ws:      "ws" + strings.TrimPrefix(*base, "http") + "/ws",
		metrics: *base + "/metrics",
		hello:   subs,
		frame:   chatpulseFrame,
	}, *clients, *d)
	stop()
	if err != nil {
		return err
	}
	fmt.Printf("%d websocket clients, measured for %v once all had their first frame; the clients run on the same cores as the server.\n", *clients, *d)
	fmt.Printf("chatpulse: the overview of %.0f chat events/s, pushed every second; alerts subscribed: %v, alerts delivered: %d (%.1f per client per second).\n",
		*events, *alerts, cp.alerts, float64(cp.alerts)/float64(*clients)/d.Seconds())
	results := []fanoutResult{cp}

	bin := findCentrifugo(*centrifugo)
	switch {
	case *centrifugo == "none":
		fmt.Println("Centrifugo: skipped (-centrifugo none).")
	case bin == "":
		fmt.Println("Centrifugo: not installed, skipped (go install github.com/centrifugal/centrifugo/v6@v6.9.1).")
	default:
		cf, err := runCentrifugo(bin, *cport, *clients, *d)
		if err != nil {
			return fmt.Errorf("centrifugo: %w", err)
		}
		fmt.Printf("Centrifugo (%s): a 1.26 KB JSON publication a second on one channel.\n", bin)
		results = append(results, cf)
	}
	fmt.Println()
	printFanout(results, *clients, *d)
	fmt.Println()
	for _, r := range results {
		stacks := (r.connected["go_memstats_stack_inuse_bytes"] - r.before["go_memstats_stack_inuse_bytes"]) / float64(*clients) / 1024
		goroutines := (r.connected["go_goroutines"] - r.before["go_goroutines"]) / float64(*clients)
		fmt.Printf("%s per client: %.1f KiB of stacks, %.1f goroutines.\n", r.name, stacks, goroutines)
	}
	return nil
}

// fanoutTarget is a websocket server to measure: where its clients
// connect, what they send once connected, and how to read its frames.
type fanoutTarget struct {
	name        string
	ws, metrics string
	hello       []string // frames each client sends on connecting
	// frame reads a frame: the data frames in it (Centrifugo may put
	// several in one), the as_of of the timed ones, how many are alerts, and
	// a frame to answer (Centrifugo's pings), if any.
	frame func(b []byte) (f frameInfo)
}

type frameInfo struct {
	ready        bool // the client has what it subscribed to
	data, alerts int
	asOf         []time.Time
	answer       []byte
}

// fanoutResult is what one target cost and delivered.
type fanoutResult struct {
	name                string
	lags                []time.Duration
	firstMax            time.Duration // the longest a client waited for its first frame
	frames, bytes       int64
	alerts              int64
	before, connected   map[string]float64 // its metrics
	after               map[string]float64
	connectTime, window time.Duration
}

// measureFanout connects n clients to t, lets them settle, and measures
// for d.
func measureFanout(t fanoutTarget, n int, d time.Duration) (fanoutResult, error) {
	res := fanoutResult{name: t.name, window: d}
	var err error
	if res.before, err = scrape(t.metrics); err != nil {
		return res, err
	}
	var (
		mu        sync.Mutex
		frames    atomic.Int64
		nbytes    atomic.Int64
		alerts    atomic.Int64
		measuring atomic.Bool
		conns     []*websocket.Conn
		wg        sync.WaitGroup
		firsts    sync.WaitGroup
	)
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	start := time.Now()
	for i := range n {
		dialed := time.Now()
		c, _, err := dialer.Dial(t.ws, nil)
		if err != nil {
			return res, fmt.Errorf("%s client %d: %w", t.name, i, err)
		}
		conns = append(conns, c)
		for _, h := range t.hello {
			if err := c.WriteMessage(websocket.TextMessage, []byte(h)); err != nil {
				return res, err
			}
		}
		firsts.Add(1)
		wg.Go(func() {
			first := true
			for {
				_, b, err := c.ReadMessage()
				if err != nil {
					if first {
						firsts.Done()
					}
					return
				}
				now := time.Now()
				f := t.frame(b)
				if f.answer != nil {
					c.WriteMessage(websocket.TextMessage, f.answer)
				}
				if first && f.ready {
					first = false
					mu.Lock()
					res.firstMax = max(res.firstMax, now.Sub(dialed))
					mu.Unlock()
					firsts.Done()
				}
				if !measuring.Load() {
					continue
				}
				frames.Add(int64(f.data))
				alerts.Add(int64(f.alerts))
				nbytes.Add(int64(len(b)))
				mu.Lock()
				for _, at := range f.asOf {
					res.lags = append(res.lags, now.Sub(at))
				}
				mu.Unlock()
			}
		})
	}
	firsts.Wait()
	res.connectTime = time.Since(start)
	time.Sleep(2 * time.Second)
	if res.connected, err = scrape(t.metrics); err != nil {
		return res, err
	}
	measuring.Store(true)
	time.Sleep(d)
	measuring.Store(false)
	if res.after, err = scrape(t.metrics); err != nil {
		return res, err
	}
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	res.frames, res.bytes, res.alerts = frames.Load(), nbytes.Load(), alerts.Load()
	return res, nil
}

// chatpulseFrame reads a chatpulse frame: a view (timed by its as_of) or
// a push's alerts (or, from chatpulse before they were coalesced, one
// alert).
func chatpulseFrame(b []byte) frameInfo {
	var f struct {
		Type string `json:"type"`
		Data struct {
			AsOf time.Time `json:"as_of"`
		} `json:"data"`
	}
	switch {
	case bytes.HasPrefix(b, []byte(`{"type":"alert`)):
		return frameInfo{data: 1, alerts: 1}
	case json.Unmarshal(b, &f) != nil || f.Type != "view":
		return frameInfo{}
	}
	return frameInfo{ready: true, data: 1, asOf: []time.Time{f.Data.AsOf}}
}

func printFanout(rs []fanoutResult, n int, d time.Duration) {
	fmt.Println("| | lag p50 | lag p99 | lag max | slowest first frame | frames/client/s | bytes/client/s | heap+stacks/client | RSS/client | CPU | CPU/frame |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		p := percentiles(r.lags, 0.5, 0.99, 1)
		mem := func(m map[string]float64) float64 {
			return m["go_memstats_heap_inuse_bytes"] + m["go_memstats_stack_inuse_bytes"]
		}
		cpu := r.after["process_cpu_seconds_total"] - r.connected["process_cpu_seconds_total"]
		fmt.Printf("| %s | %s | %s | %s | %s | %.2f | %.0f | %.1f KiB | %.1f KiB | %.0f%% | %.1f µs |\n",
			r.name, ms(p[0]), ms(p[1]), ms(p[2]), ms(r.firstMax),
			float64(r.frames)/float64(n)/d.Seconds(), float64(r.bytes)/float64(n)/d.Seconds(),
			(mem(r.connected)-mem(r.before))/float64(n)/1024,
			(r.connected["process_resident_memory_bytes"]-r.before["process_resident_memory_bytes"])/float64(n)/1024,
			100*cpu/d.Seconds(), 1e6*cpu/float64(max(r.frames, 1)))
	}
}
