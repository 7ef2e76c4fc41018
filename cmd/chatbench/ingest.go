package main

// ingest measures chatpulse's ingest against a raw NATS subscriber, in one
// run on one NATS server over TCP loopback: (a) a
// nats.go subscriber that only counts messages, (b) chatpulse ingest in
// core mode, decoding, validating, counting and aggregating everything and
// feeding the throttle policies, (c) the same reading a JetStream stream,
// and (d) the replay of that stream by a fresh chatpulse, as after a
// restart. Publisher, server and consumer share the machine, as they would
// on a small box; compare the ratios, not the absolute numbers.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/standalone"
	"github.com/chatpulse/chatpulse/throttle"
	"github.com/chatpulse/chatpulse/traffic"
)

func ingestCmd(args []string) error {
	fs := flag.NewFlagSet("ingest", flag.ExitOnError)
	n := fs.Int("n", 300_000, "events per phase")
	rooms := fs.Int("rooms", 100, "rooms (chatgen's default)")
	users := fs.Int("users", 10_000, "users (chatgen's default)")
	rounds := fs.Int("rounds", 3, "rounds of (a) and (b), alternating; their medians are reported")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the whole run here")
	fs.Parse(args)
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	return runIngest(*n, *rooms, *users, max(*rounds, 1))
}

func runIngest(n, rooms, users, rounds int) error {
	dir, err := os.MkdirTemp("", "chatbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		return err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("nats server did not start")
	}
	defer ns.Shutdown()
	url := ns.ClientURL()

	// Realistic events, made before any clock starts.
	g := traffic.New(traffic.Config{Rooms: rooms, Users: users, Seed: 1})
	payloads := make([][]byte, n)
	size := 0
	now := time.Now()
	for i := range payloads {
		_, payloads[i], _, _, _ = g.Next(now)
		size += len(payloads[i])
	}
	fmt.Printf("chatbench: %d events of %d bytes on average, %d rooms, %d users, NATS %s over TCP loopback\n\n", n, size/n, rooms, users, url)

	pub, err := nats.Connect(url, nats.Name("chatbench-publisher"))
	if err != nil {
		return err
	}
	defer pub.Close()
	publish := func(subject string) error {
		for _, p := range payloads {
			if err := pub.Publish(subject, p); err != nil {
				return err
			}
		}
		return pub.Flush()
	}

	// (a) a raw subscriber that only counts, and (b) chatpulse ingest on
	// core NATS, alternating, since the machine's speed drifts.
	var raws, cores []phase
	var ratios []float64
	for range rounds {
		raw, err := phaseRaw(url, n, publish)
		if err != nil {
			return err
		}
		var core phase
		pprof.Do(context.Background(), pprof.Labels("phase", "b"), func(context.Context) {
			core, err = phaseChatpulse(url, n, false, "", true, func() error { return publish("core.x.y") })
		})
		if err != nil {
			return err
		}
		raws, cores = append(raws, raw), append(cores, core)
		ratios = append(ratios, raw.wall.Seconds()/core.wall.Seconds())
	}
	raw, core := median(raws), median(cores)
	report(fmt.Sprintf("a  raw nats.go subscriber, counting only (median of %d)", rounds), n, raw)
	report(fmt.Sprintf("b  chatpulse ingest, core NATS, warm (median of %d)", rounds), n, core)

	// (c) chatpulse ingest, JetStream: the publisher waits for the stream's
	// acks (asynchronously, as a producer that wants its events kept would).
	// Storing costs the server far more than routing, so (a2) is the same
	// with a raw ordered consumer that only counts, for scale.
	js, err := jetstream.New(pub)
	if err != nil {
		return err
	}
	publishJS := func(subject string) func() error {
		return func() error {
			for i, p := range payloads {
				if _, err := js.PublishAsync(subject, p); err != nil {
					return err
				}
				if i%2000 == 1999 || i == len(payloads)-1 { // at most 2000 unacked
					select {
					case <-js.PublishAsyncComplete():
					case <-time.After(time.Minute):
						return fmt.Errorf("jetstream publish acks timed out")
					}
				}
			}
			return nil
		}
	}
	rawJS, err := phaseRawJetStream(url, n, publishJS("rawjs.x.y"))
	if err != nil {
		return err
	}
	report("a2 raw ordered consumer, JetStream", n, rawJS)
	jsPhase, err := phaseChatpulse(url, n, true, "BENCH", false, publishJS("js.x.y"))
	if err != nil {
		return err
	}
	report("c  chatpulse ingest, JetStream", n, jsPhase)

	// (d) a fresh chatpulse replaying the stream, as after a restart.
	replay, err := phaseChatpulse(url, n, true, "BENCH", false, func() error { return nil })
	if err != nil {
		return err
	}
	report("d  chatpulse replay after a restart", n, replay)

	slices.Sort(ratios)
	fmt.Printf("\nb/a = %.2f (median of the rounds' ratios %.2f)   c/a = %.2f   c/a2 = %.2f   replay = %.0f events/s\n",
		ratios[len(ratios)/2], ratios, raw.wall.Seconds()/jsPhase.wall.Seconds(),
		rawJS.wall.Seconds()/jsPhase.wall.Seconds(), float64(n)/replay.wall.Seconds())
	return nil
}

// median is the phase with the median wall time.
func median(ps []phase) phase {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b phase) int { return cmp.Compare(a.wall, b.wall) })
	return ps[len(ps)/2]
}

// phase is what a phase measured: wall time, and the CPU the whole process
// (publisher, server and consumer alike) spent.
type phase struct{ wall, cpu time.Duration }

func report(what string, n int, p phase) {
	fmt.Printf("%-40s %9.0f events/s  %6.2f µs CPU/event  (%v)\n", what, float64(n)/p.wall.Seconds(),
		float64(p.cpu.Microseconds())/float64(n), p.wall.Round(time.Millisecond))
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// phaseRaw times n messages from the first publish to the last one
// received by a subscriber that only counts them.
func phaseRaw(url string, n int, publish func(string) error) (phase, error) {
	nc, err := nats.Connect(url, nats.Name("chatbench-raw"))
	if err != nil {
		return phase{}, err
	}
	defer nc.Close()
	var got atomic.Int64
	done := make(chan struct{})
	sub, err := nc.Subscribe("raw.>", func(*nats.Msg) {
		if got.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		return phase{}, err
	}
	sub.SetPendingLimits(-1, -1)
	nc.Flush()
	start, cpu := time.Now(), cpuTime()
	if err := publish("raw.x.y"); err != nil {
		return phase{}, err
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return phase{}, fmt.Errorf("raw subscriber got %d of %d", got.Load(), n)
	}
	return phase{time.Since(start), cpuTime() - cpu}, nil
}

// phaseRawJetStream is phaseRaw with a JetStream stream and an ordered
// consumer that only counts.
func phaseRawJetStream(url string, n int, publish func() error) (phase, error) {
	nc, err := nats.Connect(url, nats.Name("chatbench-rawjs"))
	if err != nil {
		return phase{}, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAWJS", Subjects: []string{"rawjs.>"}, Storage: jetstream.FileStorage}); err != nil {
		return phase{}, err
	}
	cons, err := js.OrderedConsumer(ctx, "RAWJS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		return phase{}, err
	}
	var got atomic.Int64
	done := make(chan struct{})
	cc, err := cons.Consume(func(jetstream.Msg) {
		if got.Add(1) == int64(n) {
			close(done)
		}
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return phase{}, err
	}
	defer cc.Stop()
	start, cpu := time.Now(), cpuTime()
	if err := publish(); err != nil {
		return phase{}, err
	}
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		return phase{}, fmt.Errorf("raw ordered consumer got %d of %d", got.Load(), n)
	}
	return phase{time.Since(start), cpuTime() - cpu}, nil
}

// phaseChatpulse runs chatpulse's ingest (aggregator, default windows and
// throttle policies) on its own connection and times n messages from the
// start of publish until all are handled. With warm, an untimed first pass
// of the same events comes before, so that chatpulse has seen every room
// and user, as a service that has been running a while has.
func phaseChatpulse(url string, n int, useJS bool, stream string, warm bool, publish func() error) (phase, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(bus.Options{URL: url, Log: quiet})
	if err != nil {
		return phase{}, err
	}
	defer b.Close()
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	subject := "core.>"
	if useJS {
		subject = "js.>"
	}
	e, err := standalone.New(engine.Config{
		Stream: stream, Subject: subject, JetStream: useJS, Windows: ws, MaxSkew: 5 * time.Second,
		Policies: throttle.DefaultPolicies(), Instance: "chatbench", Log: quiet,
	}, prometheus.NewRegistry())
	if err != nil {
		return phase{}, err
	}
	if err := e.Attach(context.Background(), b, ""); err != nil {
		return phase{}, err
	}
	if err := e.Run(nil); err != nil {
		return phase{}, err
	}
	defer e.Close(context.Background())
	c := e
	handled := func(want int) error {
		for deadline := time.Now().Add(3 * time.Minute); c.Handled() < uint64(want); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("chatpulse handled %d of %d", c.Handled(), want)
			}
		}
		return nil
	}
	want := n
	if warm {
		if err := publish(); err != nil {
			return phase{}, err
		}
		if err := handled(n); err != nil {
			return phase{}, err
		}
		want += n
	}
	start, cpu := time.Now(), cpuTime()
	if err := publish(); err != nil {
		return phase{}, err
	}
	if err := handled(want); err != nil {
		return phase{}, err
	}
	return phase{time.Since(start), cpuTime() - cpu}, nil
}
