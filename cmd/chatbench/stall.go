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
)

// stall attacks a running chatpulse's websocket hub the cheapest way
// there is: many connections, each watching as many rooms that do not
// exist as it may (every one a view to compute), then all leaving at once.
// Meanwhile a fresh dashboard connects, and stall measures how long it
// waits for its first view, and how long the hub takes to see everyone
// leave.
func stallCmd(args []string) error {
	fs := flag.NewFlagSet("stall", flag.ExitOnError)
	base := fs.String("http", "http://127.0.0.1:8080", "chatpulse's HTTP address")
	hostile := fs.Int("hostile", 3000, "hostile connections")
	rooms := fs.Int("rooms", 64, "nonexistent rooms each watches (the per-connection limit is 64)")
	fs.Parse(args)
	ws := "ws" + strings.TrimPrefix(*base, "http") + "/ws"

	var accepted, refused, other atomic.Int64
	var (
		mu     sync.Mutex
		others = map[string]int{} // the other answers, by error
	)
	var answered sync.WaitGroup
	conns := make([]*websocket.Conn, 0, *hostile)
	start := time.Now()
	for i := range *hostile {
		c, _, err := websocket.DefaultDialer.Dial(ws, nil)
		if err != nil {
			return fmt.Errorf("hostile client %d: %w", i, err)
		}
		conns = append(conns, c)
		answered.Add(1)
		go func() {
			// Within the limit of 20 frames a second with a burst of 40.
			for j := range *rooms {
				if j == 30 {
					time.Sleep(2 * time.Second)
				}
				if c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"type":"subscribe","view":"room","room":"nx-%d-%d"}`, i, j)) != nil {
					break
				}
			}
		}()
		go func() {
			for n := 0; n < *rooms; n++ {
				_, b, err := c.ReadMessage()
				if err != nil {
					break
				}
				var f struct{ Type, Error string }
				json.Unmarshal(b, &f)
				switch {
				case f.Type == "view":
					accepted.Add(1)
				case strings.Contains(f.Error, "room views"):
					refused.Add(1)
				default:
					other.Add(1)
					mu.Lock()
					others[f.Type+" "+f.Error]++
					mu.Unlock()
				}
			}
			answered.Done()
			for { // keep reading, as a browser would
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
			}
		}()
	}
	dialed := time.Since(start)
	waitAll(&answered, 2*time.Minute)
	fmt.Printf("%d hostile connections dialed in %v; of %d subscriptions, after %v: %d views, %d refused (room views limit), %d other answers %v\n",
		*hostile, dialed.Round(time.Millisecond), *hostile**rooms, time.Since(start).Round(time.Millisecond), accepted.Load(), refused.Load(), other.Load(), others)
	m, err := scrape(*base + "/metrics")
	if err != nil {
		return err
	}
	time.Sleep(10 * time.Second)
	m2, err := scrape(*base + "/metrics")
	if err != nil {
		return err
	}
	fmt.Printf("chatpulse: %.0f clients, %.0f distinct views watched, %.0f%% of a core while they watch (10s)\n",
		m["chatpulse_ws_clients"], m["chatpulse_ws_views"], 10*(m2["process_cpu_seconds_total"]-m["process_cpu_seconds_total"]))

	first, err := firstView(ws)
	if err != nil {
		return err
	}
	fmt.Printf("a fresh dashboard's first view, hostile clients connected: %v\n", first.Round(time.Millisecond))

	// All leave at once, and a fresh dashboard comes in the middle of it.
	left := time.Now()
	for _, c := range conns {
		c.Close()
	}
	first, err = firstView(ws)
	if err != nil {
		return err
	}
	fmt.Printf("a fresh dashboard's first view, hostile clients leaving: %v\n", first.Round(time.Millisecond))
	for {
		m, err := scrape(*base + "/metrics")
		if err != nil {
			return err
		}
		if m["chatpulse_ws_clients"] == 0 {
			fmt.Printf("all %d leaves handled %v after they closed (%.0f views watched then)\n", *hostile, time.Since(left).Round(time.Millisecond), m["chatpulse_ws_views"])
			return nil
		}
		if time.Since(left) > 5*time.Minute {
			return fmt.Errorf("%.0f clients still there 5 minutes after closing", m["chatpulse_ws_clients"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstView connects a dashboard (overview and rooms list) and returns how
// long it waited for its first view.
func firstView(ws string) (time.Duration, error) {
	start := time.Now()
	dialer := websocket.Dialer{HandshakeTimeout: 5 * time.Minute}
	c, _, err := dialer.Dial(ws, nil)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","view":"overview"}`))
	c.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","view":"rooms"}`))
	for {
		c.SetReadDeadline(time.Now().Add(5 * time.Minute))
		_, b, err := c.ReadMessage()
		if err != nil {
			return 0, err
		}
		if strings.HasPrefix(string(b), `{"type":"view"`) {
			return time.Since(start), nil
		}
	}
}

// waitAll waits for wg, at most d.
func waitAll(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}
