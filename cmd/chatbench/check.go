package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// check measures throttle check latency over NATS request-reply and over
// HTTP, each at a steady rate, while chat events flow into chatpulse.
// Latency is taken from when a request was due, not when it was sent, so a
// stall shows in the numbers instead of hiding in fewer requests.
func checkCmd(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	base := fs.String("http", "http://127.0.0.1:8080", "chatpulse's HTTP address")
	url := fs.String("nats-url", nats.DefaultURL, "chatpulse's NATS")
	rate := fs.Int("rate", 5000, "checks per second")
	events := fs.Float64("events", 2000, "chat events per second meanwhile")
	d := fs.Duration("duration", 10*time.Second, "length of each run")
	workers := fs.Int("workers", 64, "requests in flight at most")
	actions := fs.Int("actions", 0, "then again with this many moderators' actions in force (slow modes and timeouts of other rooms and users), beside the run without")
	fs.Parse(args)

	nc, stop, err := chatter(*url, "chatbench-check", "chat", *events)
	if err != nil {
		return err
	}
	defer stop()

	r := rand.New(rand.NewPCG(1, 2))
	bodies := make([][]byte, 4096)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"room":"room-%d","user":"user-%d","text":"hi there"}`, r.IntN(100), r.IntN(10_000))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *workers, MaxConnsPerHost: *workers}}

	// Baselines: the same requests answered by a responder that only
	// echoes, over the same NATS server and over HTTP from this process, so
	// the transports' own latency on this machine is known.
	echo, err := nc.Subscribe("chatbench.echo", func(m *nats.Msg) { m.Respond(m.Data) })
	if err != nil {
		return err
	}
	defer echo.Unsubscribe()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	echoHTTP := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })}
	go echoHTTP.Serve(ln)
	defer echoHTTP.Close()
	echoURL := "http://" + ln.Addr().String() + "/"
	post := func(url string, body []byte) error {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	transports := []struct {
		name string
		call func(body []byte) error
	}{
		{"baseline: NATS echo responder", func(body []byte) error {
			_, err := nc.Request("chatbench.echo", body, 5*time.Second)
			return err
		}},
		{"NATS request-reply", func(body []byte) error {
			m, err := nc.Request("chatpulse.throttle.check", body, 5*time.Second)
			if err == nil && m.Header.Get("Nats-Service-Error") != "" {
				err = fmt.Errorf("%s", m.Header.Get("Nats-Service-Error"))
			}
			return err
		}},
		{"baseline: HTTP echo handler", func(body []byte) error { return post(echoURL, body) }},
		{"HTTP POST /api/v1/throttle/check", func(body []byte) error { return post(*base+"/api/v1/throttle/check", body) }},
	}
	fmt.Printf("throttle checks at %d/s for %v each, %.0f chat events/s flowing, %d in flight at most\n\n", *rate, *d, *events, *workers)
	run := func() {
		for _, tr := range transports {
			lat, errs := steady(*rate, *d, *workers, func(i int) error { return tr.call(bodies[i%len(bodies)]) })
			p := percentiles(lat, 0.5, 0.99, 0.999, 1)
			fmt.Printf("%-34s %6d checks  p50 %s  p99 %s  p99.9 %s  max %s  errors %d\n", tr.name, len(lat), ms(p[0]), ms(p[1]), ms(p[2]), ms(p[3]), errs)
		}
	}
	run()
	if *actions == 0 {
		return nil
	}
	// Other rooms' slow modes and other users' timeouts: every check looks
	// them up, none is decided by them.
	for i := range *actions {
		path, body := fmt.Sprintf("/api/v1/rooms/mod-room-%d/slowmode", i), `{"interval":"30s","for":"1h"}`
		if i%2 == 1 {
			path, body = fmt.Sprintf("/api/v1/users/mod-user-%d/timeout", i), fmt.Sprintf(`{"for":"1h","room":"room-%d"}`, i%100)
		}
		req, _ := http.NewRequest(http.MethodPut, *base+path, strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("PUT %s: status %d", path, resp.StatusCode)
		}
	}
	fmt.Printf("\nwith %d moderators' actions in force:\n", *actions)
	run()
	return nil
}

// steady calls f rate times a second for d, from at most workers
// goroutines, and returns each call's latency from when it was due.
func steady(rate int, d time.Duration, workers int, f func(i int) error) ([]time.Duration, int) {
	due := make(chan time.Time, workers)
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs int
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			i := 0
			for at := range due {
				err := f(i)
				took := time.Since(at)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					lat = append(lat, took)
				}
				mu.Unlock()
				i += 7919
			}
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for k := 0; ; k++ {
		at := start.Add(time.Duration(k) * interval)
		if at.Sub(start) >= d {
			break
		}
		time.Sleep(time.Until(at))
		due <- at
	}
	close(due)
	wg.Wait()
	return lat, errs
}
