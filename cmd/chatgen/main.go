// Command chatgen publishes synthetic chat traffic to a NATS server, in the
// shape chatpulse expects: Zipf-skewed rooms and users, at a steady rate,
// with a share of bad events on request. At the end it says what it sent;
// with --counts, as JSON with the good events per room and per user, so a
// test can compare them with chatpulse's views.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/traffic"
)

func main() {
	var (
		url    = flag.String("nats-url", nats.DefaultURL, "NATS server to publish to")
		creds  = flag.String("nats-creds", "", "NATS credentials file")
		counts = flag.Bool("counts", false, "print what was sent as JSON, with counts per room and user")
		cfg    = traffic.Config{Prefix: "chat"}
	)
	flag.Float64Var(&cfg.Rate, "rate", 1000, "events per second")
	flag.DurationVar(&cfg.Duration, "duration", 0, "how long to publish (0: until interrupted)")
	flag.IntVar(&cfg.Rooms, "rooms", 100, "number of rooms")
	flag.IntVar(&cfg.Users, "users", 10_000, "number of users")
	flag.Float64Var(&cfg.BadRatio, "bad-ratio", 0, "share of malformed or invalid events, 0..1")
	flag.StringVar(&cfg.Prefix, "prefix", "chat", "events go to <prefix>.<room>.<user>")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	flag.BoolVar(&cfg.Flood, "flood", false, "now and then one user floods a room")
	flag.Parse()
	switch {
	case cfg.Rate <= 0:
		usage("--rate must be positive")
	case cfg.Rooms < 1 || cfg.Users < 1:
		usage("--rooms and --users must be at least 1")
	case cfg.BadRatio < 0 || cfg.BadRatio > 1:
		usage("--bad-ratio must be in 0..1")
	}

	opts := []nats.Option{nats.Name("chatgen")}
	if *creds != "" {
		opts = append(opts, nats.UserCredentials(*creds))
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatgen:", err)
		os.Exit(1)
	}
	defer nc.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	c, err := traffic.New(cfg).Run(ctx, nc.Publish)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "chatgen:", err)
		os.Exit(1)
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "chatgen: flush:", err)
		os.Exit(1)
	}
	took := time.Since(start)
	fmt.Fprintf(os.Stderr, "chatgen: sent %d events (%d good, %d bad) in %v, %.0f/s\n", c.Sent, c.Good, c.Bad, took.Round(time.Millisecond), float64(c.Sent)/took.Seconds())
	if *counts {
		json.NewEncoder(os.Stdout).Encode(c)
	}
}

func usage(msg string) {
	fmt.Fprintln(os.Stderr, "chatgen:", msg)
	os.Exit(2)
}
