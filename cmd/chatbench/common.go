package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/traffic"
)

// scrape reads the unlabelled samples of a Prometheus text endpoint.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// percentiles of durations, sorted in place.
func percentiles(ds []time.Duration, ps ...float64) []time.Duration {
	slices.Sort(ds)
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		if len(ds) > 0 {
			out[i] = ds[min(len(ds)-1, int(p*float64(len(ds))))]
		}
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// chatter connects to NATS as name and publishes chat traffic at rate, on
// <prefix>.<room>.<user>, until stop is called: what flows while check,
// fanout and crowd measure.
func chatter(url, name, prefix string, rate float64) (nc *nats.Conn, stop func(), err error) {
	nc, err = nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go traffic.New(traffic.Config{Rooms: 100, Users: 10_000, Rate: rate, Prefix: prefix, Seed: 7}).Run(ctx, nc.Publish)
	return nc, func() { cancel(); nc.Close() }, nil
}

// setUp makes a directory for a run, builds chatpulse there unless *bin
// names a binary (and sets *bin), and starts a NATS server with JetStream
// kept there: what the commands that run chatpulse processes share. done
// stops the server and removes the directory.
func setUp(name string, bin *string) (dir, url string, done func(), err error) {
	dir, err = os.MkdirTemp("", "chatbench-"+name+"-")
	if err != nil {
		return "", "", nil, err
	}
	fail := func(err error) (string, string, func(), error) {
		os.RemoveAll(dir)
		return "", "", nil, err
	}
	if *bin == "" {
		*bin = filepath.Join(dir, "chatpulse")
		if out, err := exec.Command("go", "build", "-o", *bin, "./cmd/chatpulse").CombinedOutput(); err != nil {
			return fail(fmt.Errorf("build: %v\n%s", err, out))
		}
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoSigs: true, NoLog: true})
	if err != nil {
		return fail(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return fail(fmt.Errorf("nats server did not start"))
	}
	return dir, ns.ClientURL(), func() { ns.Shutdown(); os.RemoveAll(dir) }, nil
}

// startCluster starts a 3-node JetStream cluster in this process, on
// random ports under dir, and returns its nodes' client URLs once it has
// a meta leader.
func startCluster(dir string) ([]string, func(), error) {
	var ports []int
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	routes := fmt.Sprintf("nats://127.0.0.1:%d,nats://127.0.0.1:%d,nats://127.0.0.1:%d", ports[0], ports[1], ports[2])
	var nodes []*server.Server
	stop := func() {
		for _, ns := range nodes {
			ns.Shutdown()
		}
	}
	var urls []string
	for i := range 3 {
		ns, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprint("n", i), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprint("nats-n", i)),
			Cluster: server.ClusterOpts{Name: "chatbench", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(routes), NoSigs: true, NoLog: true,
		})
		if err != nil {
			stop()
			return nil, nil, err
		}
		go ns.Start()
		nodes = append(nodes, ns)
	}
	for _, ns := range nodes {
		if !ns.ReadyForConnections(10 * time.Second) {
			stop()
			return nil, nil, errors.New("a nats node did not start")
		}
		urls = append(urls, ns.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		stop()
		return nil, nil, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := js.AccountInfo(context.Background()); err == nil {
			return urls, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, errors.New("the cluster elected no JetStream meta leader in 30 s")
		}
	}
}
