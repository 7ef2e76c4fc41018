package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// decide measures rate-limit decisions as a chat server asks for them,
// one HTTP request per message over keep-alive connections: chatpulse's
// read-only and consuming checks beside gubernator's GetRateLimits with
// hits 1 (a decision that also counts, as a consuming check does), for one
// hot key and for 50,000 users in 100 rooms (Zipf). First saturated
// (workers in a closed loop): decisions per second, the server's CPU from
// /proc, decisions per CPU-second, latency; then at half the saturating
// rate, in rounds, each followed by an HTTP echo handler's in this process
// at the same rate, whose latency is the transport's own.
func decideCmd(args []string) error {
	fs := flag.NewFlagSet("decide", flag.ExitOnError)
	workers := fs.Int("workers", 8, "clients, each one keep-alive connection, in a closed loop")
	d := fs.Duration("duration", 10*time.Second, "length of each run")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	rounds := fs.Int("rounds", 5, "runs at half the saturating rate, each followed by the echo's")
	gub := fs.String("gubernator", "", "the gubernator binary (default: on PATH or in $GOPATH/bin)")
	fs.Parse(args)

	dir, url, done, err := setUp("decide", bin)
	if err != nil {
		return err
	}
	defer done()
	cp, err := startChatpulse(*bin, dir, "--nats-url", url, "--jetstream=false")
	if err != nil {
		return err
	}
	defer cp.stop()
	g, err := startGubernator(findBinary(*gub, "gubernator"))
	if err != nil {
		return err
	}
	defer g.stop()
	echo, err := echoServer()
	if err != nil {
		return err
	}

	r := rand.New(rand.NewPCG(3, 4))
	zipf := rand.NewZipf(r, 1.1, 1, 49_999)
	type keyspace struct {
		name string
		key  func() (room, user string)
	}
	spaces := []keyspace{
		{"one hot key", func() (string, string) { return "lobby", "bot" }},
		{"50,000 users Zipf", func() (string, string) { return fmt.Sprint("room-", r.IntN(100)), fmt.Sprint("user-", zipf.Uint64()) }},
	}
	var id atomic.Int64
	type target struct {
		name string
		proc *process // whose CPU is measured; nil: none
		body func(room, user string) (url string, body []byte)
	}
	targets := []target{
		{"chatpulse read-only check", cp, func(room, user string) (string, []byte) {
			return cp.url + "/api/v1/throttle/check", fmt.Appendf(nil, `{"room":%q,"user":%q,"text":"hi there"}`, room, user)
		}},
		{"chatpulse consuming check", cp, func(room, user string) (string, []byte) {
			return cp.url + "/api/v1/throttle/check", fmt.Appendf(nil, `{"room":%q,"user":%q,"text":"hi there","consume":true,"id":"m-%d"}`, room, user, id.Add(1))
		}},
		{"gubernator, hits 1", g, func(room, user string) (string, []byte) {
			return g.url + "/v1/GetRateLimits", fmt.Appendf(nil,
				`{"requests":[{"name":"user_room_flood","unique_key":"%s/%s","hits":1,"limit":10,"duration":10000,"algorithm":0}]}`, room, user)
		}},
		{"baseline: HTTP echo handler", nil, func(room, user string) (string, []byte) {
			return echo, fmt.Appendf(nil, `{"room":%q,"user":%q,"text":"hi there"}`, room, user)
		}},
	}
	fmt.Printf("%d clients, each one keep-alive connection, %v a run\n\n", *workers, *d)
	for _, ks := range spaces {
		fmt.Printf("%s, saturated:\n", ks.name)
		sat := map[string]float64{}
		for _, tg := range targets {
			// Bodies made up front, so that the clients spend nothing on
			// them: more than a run can send (a consuming check's id is
			// never sent twice).
			bodies := make([][]byte, 400_000)
			var url string
			for i := range bodies {
				url, bodies[i] = tg.body(ks.key())
			}
			var n atomic.Int64
			lat, cpu, err := closedLoop(*workers, *d, tg.proc, func(c *http.Client) error {
				return post(c, url, bodies[int(n.Add(1))%len(bodies)])
			})
			if err != nil {
				return fmt.Errorf("%s: %w", tg.name, err)
			}
			rate := float64(len(lat)) / d.Seconds()
			sat[tg.name] = rate
			p := percentiles(lat, 0.5, 0.99)
			if tg.proc == nil {
				fmt.Printf("  %-30s %8.0f/s                                p50 %s  p99 %s\n", tg.name, rate, ms(p[0]), ms(p[1]))
				continue
			}
			fmt.Printf("  %-30s %8.0f/s on %.2f cores: %7.0f per CPU-second  p50 %s  p99 %s\n",
				tg.name, rate, cpu/d.Seconds(), float64(len(lat))/cpu, ms(p[0]), ms(p[1]))
		}
		fmt.Printf("%s, at half the saturating rate of each (each round followed by the echo's at the same rate):\n", ks.name)
		for _, tg := range targets[:3] {
			half := int(sat[tg.name] / 2)
			bodies := make([][]byte, 400_000)
			var url string
			for i := range bodies {
				url, bodies[i] = tg.body(ks.key())
			}
			call := func(to string) func(int) error {
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
				var n atomic.Int64
				return func(int) error { return post(client, to, bodies[int(n.Add(1))%len(bodies)]) }
			}
			// Each round runs the echo right after, at the same rate, so
			// that what else the machine does slows both alike as far as
			// it can: each round's ratio, and their median.
			var ratios []float64
			for round := range *rounds {
				lat, errs := steady(half, *d, 64, call(url))
				base, _ := steady(half, *d, 64, call(echo))
				p, b := percentiles(lat, 0.5, 0.99), percentiles(base, 0.5, 0.99)
				ratios = append(ratios, float64(p[1])/float64(b[1]))
				fmt.Printf("  %-30s at %6d/s, round %d: p50 %s  p99 %s (%.2fx the echo's %s)  errors %d\n",
					tg.name, half, round+1, ms(p[0]), ms(p[1]), ratios[round], ms(b[1]), errs)
			}
			slices.Sort(ratios)
			fmt.Printf("  %-30s p99 over the echo's, median of %d rounds: %.2fx\n", tg.name, len(ratios), ratios[len(ratios)/2])
		}
		fmt.Println()
	}
	return nil
}

// closedLoop runs workers clients, each on its own keep-alive connection,
// each making the next call as soon as the last is answered, for d; it
// returns the latencies and the CPU seconds p used meanwhile (none: nil).
func closedLoop(workers int, d time.Duration, p *process, call func(*http.Client) error) ([]time.Duration, float64, error) {
	var (
		mu    sync.Mutex
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	var cpu0 float64
	if p != nil {
		cpu0, _ = p.cpu()
	}
	end := time.Now().Add(d)
	for range workers {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) {
				start := time.Now()
				if err := call(client); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	var cpu float64
	if p != nil {
		c, err := p.cpu()
		if err != nil {
			return nil, 0, err
		}
		cpu = c - cpu0
	}
	return lat, cpu, first
}

func post(client *http.Client, url string, body []byte) error {
	return postWith(client, url, body, nil)
}

// postWith posts body as JSON with the headers h too, and wants 200.
func postWith(client *http.Client, url string, body []byte, h http.Header) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	return nil
}

// echoServer serves, in this process, an HTTP handler that echoes the
// body: the transport's own cost.
func echoServer() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go (&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })}).Serve(ln)
	return "http://" + ln.Addr().String() + "/", nil
}

// findBinary is flagValue, or name on PATH or in $GOPATH/bin.
func findBinary(flagValue, name string) string {
	if flagValue != "" {
		return flagValue
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath, _ := exec.Command("go", "env", "GOPATH").Output()
	return filepath.Join(string(bytes.TrimSpace(gopath)), "bin", name)
}

// startGubernator runs one gubernator peer on loopback (its own
// memberlist, so that it owns every key) and waits until it answers.
func startGubernator(bin string) (*process, error) {
	if !fileExists(bin) {
		return nil, fmt.Errorf("gubernator not found at %s: go install github.com/gubernator-io/gubernator/v2/cmd/gubernator@v2.13.0", bin)
	}
	ports := make([]string, 3) // HTTP, gRPC, memberlist
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().String()
		l.Close()
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"GUBER_HTTP_ADDRESS="+ports[0], "GUBER_GRPC_ADDRESS="+ports[1], "GUBER_ADVERTISE_ADDRESS="+ports[1],
		"GUBER_PEER_DISCOVERY_TYPE=member-list", "GUBER_MEMBERLIST_ADDRESS="+ports[2], "GUBER_MEMBERLIST_BIND_ADDRESS="+ports[2], "GUBER_MEMBERLIST_KNOWN_NODES="+ports[2],
		"GUBER_LOG_LEVEL=error", "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, url: "http://" + ports[0]}
	if err := waitHTTP(p.url+"/v1/HealthCheck", 30*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("gubernator: %w", err)
	}
	return p, nil
}
