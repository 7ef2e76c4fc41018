package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// crowd measures what a crowd of dashboards costs everyone else. It starts
// chatpulse, publishes chat traffic at a steady rate, and holds many
// websocket clients, each watching what a dashboard watches: the
// overview, the rooms list, a room and the alerts. Meanwhile it times,
// again and again, a fresh dashboard's first view and a /healthz on a new
// connection, each from when it was due, so a stall shows in the figures,
// and how long chatpulse's threads waited, runnable, for a CPU meanwhile
// (the machine's other work, mostly: when that is high, so are the
// figures).
// The crowd is a child process (crowd-hold): its thousands of readers,
// woken together by each push, would otherwise delay the probes' own
// goroutines (and the NATS server's, which runs in chatbench), and the
// figures would be chatbench's too. -together holds it in chatbench's
// own process all the same: a test client holding the crowd and probing
// at once sees that. With -baseline it does the same with another build,
// in alternating rounds, each on a fresh chatpulse.
func crowdCmd(args []string) error {
	fs := flag.NewFlagSet("crowd", flag.ExitOnError)
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	baseline := fs.String("baseline", "", "another chatpulse binary (an older build) to measure in alternating rounds")
	clients := fs.Int("clients", 3000, "websocket clients held")
	events := fs.Float64("events", 2000, "chat events per second")
	d := fs.Duration("duration", 30*time.Second, "how long to probe once all clients have their first views")
	probes := fs.Int("probes", 10, "probes of each kind a second")
	rounds := fs.Int("rounds", 1, "rounds; with -baseline, each runs both builds, in turn")
	together := fs.Bool("together", false, "hold the clients in this process, beside the probes and the NATS server, not in a child process")
	fs.Parse(args)

	dir, url, done, err := setUp("crowd", bin)
	if err != nil {
		return err
	}
	defer done()
	builds := []string{*bin}
	if *baseline != "" {
		builds = append(builds, *baseline)
	}
	where := "in a child process"
	if *together {
		where = "in chatbench's process, beside the probes and the NATS server"
	}
	fmt.Printf("%d websocket clients held %s (overview, rooms list, a room of 100, alerts), %.0f chat events/s on JetStream, %d probes of each kind a second for %v; all on the same cores as chatpulse\n\n",
		*clients, where, *events, *probes, *d)
	fmt.Println("| build | round | load | first view p50 | p90 | p99 | max | /healthz p50 | p90 | p99 | max | heap+stacks, held | after | RSS after | CPU | waiting for a CPU | frames/client/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	run := 0
	for round := range max(*rounds, 1) {
		for _, i := range rotated(len(builds), round) {
			run++
			r, err := measureCrowd(builds[i], dir, url, run, *clients, *events, *d, *probes, *together)
			if err != nil {
				return fmt.Errorf("%s: %w", builds[i], err)
			}
			fv := percentiles(r.first, 0.5, 0.9, 0.99, 1)
			hz := percentiles(r.healthz, 0.5, 0.9, 0.99, 1)
			mem := func(m map[string]float64) float64 {
				return (m["go_memstats_heap_inuse_bytes"] + m["go_memstats_stack_inuse_bytes"]) / (1 << 20)
			}
			fmt.Printf("| %s | %d | %s → %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f MiB | %.0f MiB | %.0f MiB | %.0f%% | %.0f%% | %.2f |\n",
				filepath.Base(builds[i]), round+1, r.load[0], r.load[1], ms(fv[0]), ms(fv[1]), ms(fv[2]), ms(fv[3]), ms(hz[0]), ms(hz[1]), ms(hz[2]), ms(hz[3]),
				mem(r.held), mem(r.after), r.after["process_resident_memory_bytes"]/(1<<20),
				100*(r.after["process_cpu_seconds_total"]-r.held["process_cpu_seconds_total"])/d.Seconds(),
				100*r.waited.Seconds()/d.Seconds(),
				float64(r.frames)/float64(*clients)/d.Seconds())
			if r.errs > 0 {
				fmt.Printf("(%d probes failed)\n", r.errs)
			}
		}
	}
	return nil
}

// crowdResult is one run's probes, and chatpulse's metrics once the
// clients were held and after the probes.
type crowdResult struct {
	first, healthz []time.Duration
	errs           int
	load           [2]string     // the machine's 1-minute load average as the probes start and end
	waited         time.Duration // chatpulse's threads, runnable, waited for a CPU while probed
	held, after    map[string]float64
	frames         int64 // the crowd received while probed
}

// measureCrowd runs one chatpulse of bin on a stream of its own, holds n
// clients on it (in a child process, or in this one if together) while
// events flow, and probes it for d.
func measureCrowd(bin, dir, url string, run, n int, events float64, d time.Duration, probes int, together bool) (crowdResult, error) {
	var res crowdResult
	stream, prefix := fmt.Sprint("CROWD", run), fmt.Sprint("crowd", run)
	cp, err := startChatpulse(bin, dir, "--nats-url", url, "--stream", stream, "--subject", prefix+".>")
	if err != nil {
		return res, err
	}
	_, stop, err := chatter(url, "chatbench-crowd", prefix, events)
	if err != nil {
		cp.stop()
		return res, err
	}
	defer func() {
		stop()
		cp.stop()
		if nc, err := nats.Connect(url); err == nil { // the run's events are not needed again
			js, _ := jetstream.New(nc)
			js.DeleteStream(context.Background(), stream)
			nc.Close()
		}
	}()
	time.Sleep(2 * time.Second) // traffic under way

	ws := "ws" + strings.TrimPrefix(cp.url, "http") + "/ws"
	var count func() (int64, error)
	if together {
		frames, stop, err := holdCrowd(ws, n)
		if err != nil {
			return res, err
		}
		defer stop()
		count = func() (int64, error) { return frames.Load(), nil }
	} else {
		crowd, err := startCounting("crowd-hold", ws, strconv.Itoa(n)) // answers once all have a view
		if err != nil {
			return res, err
		}
		defer crowd.stop()
		count = crowd.count
	}
	time.Sleep(2 * time.Second)
	if res.held, err = scrape(cp.url + "/metrics"); err != nil {
		return res, err
	}
	if res.frames, err = count(); err != nil {
		return res, err
	}
	noKeepAlive := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	var (
		wg    sync.WaitGroup
		ferrs int
	)
	res.load[0] = strings.Fields(loadavg())[0]
	before, err := readSchedstat(cp.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	wg.Go(func() {
		res.first, ferrs = steady(probes, d, 8, func(int) error {
			_, err := firstView(ws)
			return err
		})
	})
	res.healthz, res.errs = steady(probes, d, 8, func(int) error {
		resp, err := noKeepAlive.Get(cp.url + "/healthz")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	wg.Wait()
	res.load[1] = strings.Fields(loadavg())[0]
	after, err := readSchedstat(cp.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	res.waited = after.wait - before.wait
	res.errs += ferrs
	if res.after, err = scrape(cp.url + "/metrics"); err != nil {
		return res, err
	}
	frames, err := count()
	res.frames = frames - res.frames
	return res, err
}

// crowdHoldCmd holds a crowd (holdCrowd) of N clients on WS, and answers
// each line on stdin with the frames they received so far.
func crowdHoldCmd(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: chatbench crowd-hold WS N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	frames, stop, err := holdCrowd(args[0], n)
	if err != nil {
		return err
	}
	defer stop()
	return answerCounts(frames.Load)
}

// holdCrowd connects n websocket clients to ws, each watching what a
// dashboard watches and reading everything it is sent, and returns once
// each has had a frame (or after two minutes), with the count of frames
// received and what closes them all.
func holdCrowd(ws string, n int) (*atomic.Int64, func(), error) {
	dialer := websocket.Dialer{HandshakeTimeout: time.Minute}
	var (
		frames atomic.Int64
		firsts sync.WaitGroup
		conns  []*websocket.Conn
	)
	stop := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for i := range n {
		c, _, err := dialer.Dial(ws, nil)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("client %d: %w", i, err)
		}
		conns = append(conns, c)
		for _, f := range []string{
			`{"type":"subscribe","view":"overview"}`,
			`{"type":"subscribe","view":"rooms"}`,
			fmt.Sprintf(`{"type":"subscribe","view":"room","room":"room-%d"}`, i%100),
			`{"type":"subscribe","view":"alerts"}`,
		} {
			if err := c.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
				stop()
				return nil, nil, fmt.Errorf("client %d: %w", i, err)
			}
		}
		firsts.Add(1)
		go func() {
			for first := true; ; first = false {
				_, r, err := c.NextReader()
				if err == nil {
					_, err = io.Copy(io.Discard, r)
					frames.Add(1)
				}
				if first {
					firsts.Done()
				}
				if err != nil {
					return
				}
			}
		}()
	}
	waitAll(&firsts, 2*time.Minute)
	return &frames, stop, nil
}
