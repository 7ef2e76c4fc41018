// Package natstest starts the NATS servers a test runs against, each
// topology in one line, as nats-server's jetstream_helpers_test.go does
// for its own tests:
//
//	url := natstest.Start(t).URL()     // one server
//	c := natstest.StartCluster(t)      // three nodes
//	c := natstest.StartCrashCluster(t) // three nodes, every route through a fault proxy
//
// Every server runs JetStream, kept in t.TempDir(), on random local
// ports, and stops when the test ends. Ready is the one wait for servers
// to serve: it says what is not ready yet.
//
// A node of any of them can stop (Stop) and start again on its store and
// ports (Restart). A node of a crash cluster can also crash (Crash): its
// peers hear nothing more from it, not even that it went, until Gone.
//
// It is for tests only: nothing of chatpulse imports it.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/internal/proxy"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// readyWait bounds Ready: a start, an election after a node is lost
// (Raft's election timeout is 4-9 s), a restart on a store.
const readyWait = 30 * time.Second

// A Cluster is the NATS servers a test started: one, or the nodes of a
// cluster.
type Cluster struct {
	t     testing.TB
	url   string
	opts  []*server.Options
	nodes []*server.Server // nil while stopped
	// via is the proxy of the route from node i to node j, in a crash
	// cluster; nil otherwise.
	via map[[2]int]*proxy.Proxy
}

// Start runs one NATS server, with opts applied to its options (auth,
// accounts, JetStream off) before it starts, and waits until it is Ready.
func Start(t testing.TB, opts ...func(*server.Options)) *Cluster {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	for _, f := range opts {
		f(o)
	}
	return start(t, []*server.Options{o}, nil)
}

// StartCluster runs a 3-node cluster and waits until it is Ready: its
// JetStream has a meta leader.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	ports := freePorts(t, 3)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprint("nats://127.0.0.1:", p))
	}
	return startCluster(t, ports, func(int) []string { return routes }, nil)
}

// StartCrashCluster is StartCluster with every route between two nodes
// through a proxy of its own, so that Crash can lose a node as a machine
// that stops does.
func StartCrashCluster(t testing.TB) *Cluster {
	t.Helper()
	ports := freePorts(t, 3)
	via := map[[2]int]*proxy.Proxy{}
	for i := range ports {
		for j := range ports {
			if i != j {
				via[[2]int{i, j}] = proxy.New(t, fmt.Sprint("127.0.0.1:", ports[j]))
			}
		}
	}
	return startCluster(t, ports, func(i int) []string {
		var routes []string
		for j := range ports {
			if p := via[[2]int{i, j}]; p != nil {
				routes = append(routes, "nats://"+p.Addr())
			}
		}
		return routes
	}, via)
}

// startCluster starts a node listening for routes on each of ports, node
// i routed to routes(i).
func startCluster(t testing.TB, ports []int, routes func(i int) []string, via map[[2]int]*proxy.Proxy) *Cluster {
	t.Helper()
	var opts []*server.Options
	for i, port := range ports {
		opts = append(opts, &server.Options{
			ServerName: fmt.Sprint("n", i), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(),
			// Routes only as listed: none learnt from the others around
			// the proxies.
			Cluster: server.ClusterOpts{Name: "chatpulse-test", Host: "127.0.0.1", Port: port, NoAdvertise: true},
			Routes:  server.RoutesFromStr(strings.Join(routes(i), ",")),
			NoSigs:  true, NoLog: true,
		})
	}
	return start(t, opts, via)
}

func start(t testing.TB, opts []*server.Options, via map[[2]int]*proxy.Proxy) *Cluster {
	t.Helper()
	c := &Cluster{t: t, opts: opts, nodes: make([]*server.Server, len(opts)), via: via}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	for i := range opts {
		c.run(i)
	}
	c.Ready()
	var urls []string
	for i, ns := range c.nodes {
		urls = append(urls, ns.ClientURL())
		// A restart listens where clients already connect.
		c.opts[i].Port = ns.Addr().(*net.TCPAddr).Port
	}
	c.url = strings.Join(urls, ",")
	if len(opts) > 1 {
		wait.For(t, readyWait, c.placeable)
	}
	return c
}

// placeable makes, and deletes, a stream with a replica on every node:
// the meta leader can place one only once it has every node's
// configuration, which may come after Ready (which sees its peers and
// their stats). Before, a stream of chatpulse at three replicas would be
// refused "no suitable peers for placement, peer offline".
func (c *Cluster) placeable() error {
	nc, err := nats.Connect(c.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const name = "NATSTEST_PLACEABLE"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"natstest.placeable"}, Replicas: len(c.nodes), Storage: jetstream.MemoryStorage}); err != nil {
		return fmt.Errorf("a stream at %d replicas: %w", len(c.nodes), err)
	}
	return js.DeleteStream(ctx, name)
}

// run starts node i with its options.
func (c *Cluster) run(i int) {
	c.t.Helper()
	ns, err := server.NewServer(c.opts[i].Clone()) // a server may fill in what it was given
	if err != nil {
		c.t.Fatalf("nats node %d: %v", i, err)
	}
	go ns.Start()
	c.nodes[i] = ns
}

// URL names every node, for a client: nats://host:port[,...].
func (c *Cluster) URL() string { return c.url }

// Node is node i's server; nil while it is stopped.
func (c *Cluster) Node(i int) *server.Server { return c.nodes[i] }

// Index is the index of the node named name (n0, n1, n2 in a cluster),
// or -1.
func (c *Cluster) Index(name string) int {
	return slices.IndexFunc(c.opts, func(o *server.Options) bool { return o.ServerName == name })
}

// Ready waits until every running node accepts clients and its
// JetStream (where it runs one) is current; in a cluster, until the meta
// leader knows every running node as a peer, and each of streams (of the
// global account) has a leader on a running node.
// It fails the test with what was not ready yet after 30 s.
func (c *Cluster) Ready(streams ...string) {
	c.t.Helper()
	wait.For(c.t, readyWait, func() error { return c.ready(streams) })
}

func (c *Cluster) ready(streams []string) error {
	var leader *server.Server
	var running []string
	for i, ns := range c.nodes {
		switch {
		case ns == nil:
			continue
		case !ns.ReadyForConnections(time.Millisecond):
			return fmt.Errorf("node %d does not accept clients yet", i)
		case !c.opts[i].JetStream:
			continue
		case !ns.JetStreamEnabled():
			return fmt.Errorf("node %d has not started JetStream yet", i)
		case !ns.JetStreamIsCurrent():
			return fmt.Errorf("node %d knows no JetStream meta leader yet", i)
		case !ns.JetStreamIsClustered():
			return nil // one server
		}
		running = append(running, ns.Name())
		if ns.JetStreamIsLeader() {
			leader = ns
		}
	}
	switch {
	case len(running) == 0: // no JetStream cluster running
		return nil
	case leader == nil:
		return errors.New("no running node is the JetStream meta leader yet")
	case !isSubset(running, leader.JetStreamClusterPeers()):
		// Until it does, a stream at three replicas has no place.
		return fmt.Errorf("the meta leader %s knows %v as JetStream peers, not yet every running node %v", leader.Name(), leader.JetStreamClusterPeers(), running)
	}
	for _, stream := range streams {
		if !slices.ContainsFunc(c.nodes, func(ns *server.Server) bool {
			return ns != nil && ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream)
		}) {
			return fmt.Errorf("stream %s has no leader on a running node yet (nodes stopped: %v)", stream, c.stopped())
		}
	}
	return nil
}

// isSubset reports whether every one of a is in b.
func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// stopped lists the nodes that are not running.
func (c *Cluster) stopped() []string {
	var names []string
	for i, ns := range c.nodes {
		if ns == nil {
			names = append(names, fmt.Sprint(i))
		}
	}
	return names
}

// Stop shuts node i down as a clean stop does: its clients and its peers
// see its connections close. It returns once the node is down.
func (c *Cluster) Stop(i int) {
	if ns := c.nodes[i]; ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		c.nodes[i] = nil
	}
}

// Crash loses node i as a machine that stops does: its routes stall (the
// others hear nothing more from it, not even that it went: they elect
// new leaders after Raft's election timeout, 4-9 s), then it shuts down
// (its clients reconnect elsewhere). Only in a crash cluster.
func (c *Cluster) Crash(i int) {
	c.t.Helper()
	c.routes(i, (*proxy.Proxy).Stall)
	c.Stop(i)
}

// Gone is the others noticing that node i's routes are dead (a real
// cluster does, by pings, within minutes), so that they stop sending it
// what its clients had asked for before. Only in a crash cluster.
func (c *Cluster) Gone(i int) {
	c.t.Helper()
	c.routes(i, (*proxy.Proxy).Drop)
}

// Restart starts node i again, stopped or crashed, on its store and its
// ports, and waits until the servers are Ready.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Stop(i)
	if c.via != nil { // what a crash left hanging goes
		c.routes(i, (*proxy.Proxy).Resume)
		c.Gone(i)
	}
	c.run(i)
	c.Ready()
}

// routes does do to each proxy of a route to or from node i.
func (c *Cluster) routes(i int, do func(*proxy.Proxy)) {
	c.t.Helper()
	if c.via == nil {
		c.t.Fatal("natstest: a node's routes can stall or drop only in a crash cluster (StartCrashCluster)")
	}
	for pair, p := range c.via {
		if pair[0] == i || pair[1] == i {
			do(p)
		}
	}
}

// freePorts finds n TCP ports nobody listens on now: a cluster's route
// ports, which every node must know before any starts.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Bus connects to the server at url as chatpulse does, quietly, until the
// test ends.
func Bus(t testing.TB, url string) *bus.Bus {
	t.Helper()
	b, err := bus.Open(bus.Options{URL: url, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
