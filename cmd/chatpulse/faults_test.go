package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/group"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/internal/natstest"
	tcpproxy "github.com/chatpulse/chatpulse/internal/proxy"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// alertCount counts the alerts heard on chatpulse.alerts.throttle, per
// crossing (policy, room, user, at).
type alertCount struct {
	mu    sync.Mutex
	heard map[throttle.Alert]int
	total int
	// kept says, for a wait's error, how many alerts the stream read
	// holds ("": not a stream).
	kept func() string
}

func countAlerts(t *testing.T, url string) (*alertCount, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &alertCount{heard: map[throttle.Alert]int{}}
	if _, err := nc.Subscribe("chatpulse.alerts.throttle", func(m *nats.Msg) { c.add(t, m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// countStreamAlerts counts the alerts group's alert stream keeps, read
// from its start by a feed, as a member reads events. Where a NATS node
// is lost, this is what to count: the stream republishes what it keeps
// on chatpulse.alerts.throttle over core NATS, which reaches a
// subscriber at most once, and not while the route to the node
// republishing is stalled; the stream itself keeps each crossing once,
// for consumers. (A feed, not an ordered consumer of its own: the
// consumer of one, recreated after the node loss, can wait for the node
// forever.)
func countStreamAlerts(t *testing.T, url, group string) *alertCount {
	t.Helper()
	b, err := bus.Open(bus.Options{URL: url, JetStream: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	feeds := b.NewFeeds()
	feed, _, err := feeds.Start(context.Background(), bus.FeedConfig{Stream: bus.AlertStream(group), Filter: bus.AlertIntake(group), FromSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	c := &alertCount{heard: map[throttle.Alert]int{}, kept: func() string {
		s, err := js.Stream(context.Background(), bus.AlertStream(group))
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("the stream keeps %d", s.CachedInfo().State.Msgs)
	}}
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]ingest.Msg, 0, 64)
		for more := true; more; {
			buf, more = feeds.Source().Next(buf[:0])
			for _, m := range buf {
				c.add(t, m.Data)
			}
		}
	}()
	t.Cleanup(func() {
		feed.Stop()
		feeds.Source().Stop()
		<-read
		b.Close()
	})
	return c
}

// add counts one alert heard.
func (c *alertCount) add(t *testing.T, data []byte) {
	var a throttle.Alert
	if err := json.Unmarshal(data, &a); err != nil {
		t.Errorf("alert %s: %v", data, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heard[a]++
	c.total++
}

// distinct is how many crossings were heard, and how many alerts.
func (c *alertCount) counts() (distinct, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.heard), c.total
}

// missing lists (up to ten of) the users u0..u<n-1> whose crossing was
// not heard.
func (c *alertCount) missing(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	users := map[string]bool{}
	for a := range c.heard {
		users[a.User] = true
	}
	var out []string
	for u := 0; u < n && len(out) < 10; u++ {
		if name := fmt.Sprint("u", u); !users[name] {
			out = append(out, name)
		}
	}
	return out
}

// twice lists the crossings heard more than once.
func (c *alertCount) twice() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for a, n := range c.heard {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s/%s x%d", a.Policy, a.User, n))
		}
	}
	return out
}

// crossingEvents are the three messages that take user u over a limit
// of two an hour, at now.
func crossingEvents(u int, now int64) []chat.Event {
	e := chat.Event{Room: fmt.Sprint("r", u%5), User: fmt.Sprint("u", u), TS: now}
	return []chat.Event{e, e, e}
}

// crossings publishes, user after user, the crossingEvents of each, until
// stop is closed; users counts those it published. As a chat
// server would, it publishes again while the stream has no leader (a
// node lost), with one Nats-Msg-Id, so that the stream keeps each once.
func crossings(t *testing.T, url string, now int64, stop <-chan struct{}, users *atomic.Int64) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Error(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for u := 0; ; u++ {
		select {
		case <-stop:
			return
		default:
		}
		for i, e := range crossingEvents(u, now) {
			id := u*3 + i
			msg := &nats.Msg{Subject: "chat." + e.Room + "." + e.User, Data: []byte(eventJSON(e, id)), Header: nats.Header{"Nats-Msg-Id": {fmt.Sprint("crossing-", id)}}}
			if err := wait.Until(30*time.Second, func() error {
				_, err := js.PublishMsg(context.Background(), msg)
				return err
			}); err != nil {
				t.Error(err)
				return
			}
		}
		users.Store(int64(u + 1))
	}
}

// crossingTraffic is a group's test of alerts under faults: a policy of
// two messages an hour per user, traffic in which each user crosses it
// once, and the alerts on the bus counted.
type crossingTraffic struct {
	t      *testing.T
	url    string
	args   []string // the members' flags for the policy
	alerts *alertCount
	stop   chan struct{}
	done   chan struct{}
	users  atomic.Int64
	now    int64  // the events' ts
	group  string // set: count the alerts its alert stream keeps (countStreamAlerts)
}

func newCrossingTraffic(t *testing.T, url string) *crossingTraffic {
	policies := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(policies, []byte("policies:\n  - {name: user_limit, scope: user, algorithm: sliding_window, limit: 2, window: 1h}\n"), 0o644)
	return &crossingTraffic{t: t, url: url, args: []string{"--policies", policies, "--snapshot-interval", "0"}}
}

// start counts alerts from now on and starts the traffic at now.
func (c *crossingTraffic) start(now int64) {
	c.now = now
	if c.group != "" {
		c.alerts = countStreamAlerts(c.t, c.url, c.group)
	} else {
		c.alerts, _ = countAlerts(c.t, c.url)
	}
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		crossings(c.t, c.url, now, c.stop, &c.users)
	}()
}

// more waits until n more crossings than now have been heard.
func (c *crossingTraffic) more(n int) {
	c.t.Helper()
	d, _ := c.alerts.counts()
	c.heard(d + n)
}

func (c *crossingTraffic) heard(n int) {
	c.t.Helper()
	wait.For(c.t, 30*time.Second, func() error {
		if d, _ := c.alerts.counts(); d < n {
			kept := ""
			if c.alerts.kept != nil {
				kept = ", " + c.alerts.kept()
			}
			return fmt.Errorf("%d crossings heard%s, want at least %d (%d users published); of the first %d users, not heard: %v", d, kept, n, c.users.Load(), n, c.alerts.missing(n))
		}
		return nil
	})
}

// end stops the traffic, waits until every member has read it all and
// every crossing was heard, stops the members cleanly, and checks that
// each crossing was alerted exactly once.
func (c *crossingTraffic) end(ms []*testMain, what string) {
	c.t.Helper()
	c.finish(ms)
	for _, tm := range ms {
		if err := tm.Close(); err != nil {
			c.t.Fatal(err)
		}
	}
	c.once(what)
}

// finish stops the traffic, waits until every member has read it all and
// every crossing was heard, and returns the events published.
func (c *crossingTraffic) finish(ms []*testMain) []chat.Event {
	c.t.Helper()
	close(c.stop)
	<-c.done
	n := int(c.users.Load())
	c.heard(n)
	wait.For(c.t, 30*time.Second, func() error {
		for _, tm := range ms {
			if lag := tm.metric("chatpulse_group_lag_messages"); lag != 0 {
				return fmt.Errorf("%s: lag %v", tm.url, lag)
			}
		}
		return nil
	})
	var evs []chat.Event
	for u := range n {
		evs = append(evs, crossingEvents(u, c.now)...)
	}
	return evs
}

// once checks, once the members have stopped, that each crossing was
// alerted exactly once.
func (c *crossingTraffic) once(what string) {
	c.t.Helper()
	n := int(c.users.Load())
	_, nc := countAlerts(c.t, c.url) // a round trip on the server after every alert it republished
	nc.Flush()
	if c.group != "" { // every alert the stream keeps read
		js, _ := jetstream.New(nc)
		wait.For(c.t, 30*time.Second, func() error {
			s, err := js.Stream(context.Background(), bus.AlertStream(c.group))
			if err != nil {
				return err
			}
			if _, total := c.alerts.counts(); uint64(total) < s.CachedInfo().State.Msgs {
				return fmt.Errorf("read %d of the %d alerts the stream keeps", total, s.CachedInfo().State.Msgs)
			}
			return nil
		})
	}
	if d, total := c.alerts.counts(); d != n || total != n {
		c.t.Errorf("%d users crossed once each: heard %d crossings in %d alerts; twice: %v", n, d, total, c.alerts.twice())
	} else {
		c.t.Logf("%d crossings, each alerted once, %s", n, what)
	}
}

// Every crossing is alerted exactly once on the bus for the group while
// members join and leave cleanly as traffic flows: a partition's holder
// stops it before releasing it and records how far it alerted, and the
// group's alert stream drops what two holders both sent.
func TestGroupAlertsOnceAcrossRebalance(t *testing.T) {
	url := natstest.Start(t).URL()
	clock := newFrozen()
	c := newCrossingTraffic(t, url)
	ms := startGroup(t, url, "g", 2, clock.Now, c.args...)
	c.start(clock.ms.Load())
	c.more(20)
	// A member joins while traffic flows.
	ms = append(ms, startMainAt(t, clock.Now, append([]string{"--nats-url", url, "--group", "g", "--instance", "m2", "--partitions", "8"}, c.args...)...))
	waitComplete(t, ms[0], 3)
	c.more(20)
	// One leaves cleanly while traffic flows.
	if err := ms[0].Close(); err != nil {
		t.Fatal(err)
	}
	ms = ms[1:]
	waitComplete(t, ms[0], 2)
	c.more(20)
	c.end(ms, "across a join and three clean stops")
}

// Every crossing is alerted exactly once on the bus for the group while
// a member is cut off (a TCP proxy between it and NATS holds all its
// traffic, both ways) as traffic flows, and when it comes back: it stops
// its partitions when their validity ends, the others take them over and
// alert from the last progress it wrote, and what it sent before the cut
// that arrives late is a duplicate the alert stream drops.
func TestGroupAlertsOnceAcrossACutOffMember(t *testing.T) {
	url := natstest.Start(t).URL()
	clock := newFrozen()
	c := newCrossingTraffic(t, url)
	ms := startGroup(t, url, "g", 2, clock.Now, c.args...)
	u, _ := neturl.Parse(url)
	p := tcpproxy.New(t, u.Host)
	ms = append(ms, startMainAt(t, clock.Now, append([]string{"--nats-url", "nats://" + p.Addr(), "--group", "g", "--instance", "cut", "--partitions", "8"}, c.args...)...))
	waitComplete(t, ms[0], 3)
	c.start(clock.ms.Load())
	c.more(20)
	p.Stall()
	waitComplete(t, ms[0], 2) // its member key ran out: the others own everything
	c.more(20)
	p.Resume()
	waitComplete(t, ms[0], 3)
	c.more(20)
	c.end(ms, "across a member cut off and back")
}

// A member whose clock runs a minute ahead of the others' is named in
// /api/v1/group and in the log, and cannot carry the group's views into
// its future (past the others' clock plus --max-skew, 5 s): its
// partitions count as missing instead, on every member, itself included.
func TestGroupSkewedClock(t *testing.T) {
	url := natstest.Start(t).URL()
	ahead := func() time.Time { return time.Now().Add(time.Minute) }
	ms := startGroup(t, url, "g", 2, nil)
	fast := startMainAt(t, ahead, "--nats-url", url, "--group", "g", "--instance", "fast", "--partitions", "8")
	waitComplete(t, ms[0], 3)
	publishGroup(t, url, groupTrace(5, time.Now().UnixMilli(), 200))
	for _, tm := range append(ms, fast) {
		wait.For(t, 30*time.Second, func() error {
			var st struct {
				Skewed  []string `json:"skewed"`
				Members []struct {
					Instance    string `json:"instance"`
					ClockOffset int64  `json:"clock_offset_ms"`
				} `json:"members"`
			}
			tm.get("/api/v1/group", &st)
			if len(st.Skewed) != 1 || st.Skewed[0] != "fast" {
				return fmt.Errorf("%s names %v as skewed (members %+v), want [fast]", tm.url, st.Skewed, st.Members)
			}
			return nil
		})
		var v struct {
			AsOf     chat.Time `json:"as_of"`
			Complete bool      `json:"complete"`
			Missing  int       `json:"missing_partitions"`
		}
		tm.get("/api/v1/overview", &v)
		// The bound is half the fast clock's lead, not the 5 s: the
		// clocks are compared through the server's, within a write's trip.
		if ahead := time.Until(time.UnixMilli(int64(v.AsOf))); ahead > 30*time.Second || v.Complete {
			t.Errorf("%s: overview as_of %v ahead of the others' clock, complete %v: carried into the fast member's future", tm.url, ahead, v.Complete)
		} else {
			t.Logf("%s: overview as_of %v ahead of the others' clock, %d partitions missing", tm.url, ahead.Round(time.Millisecond), v.Missing)
		}
	}
	for _, tm := range []*testMain{ms[0], fast} {
		if log := tm.log.String(); !strings.Contains(log, "clock is off from the group's") || !strings.Contains(log, "member=fast") {
			t.Errorf("%s's log does not name the skewed member", tm.url)
		}
	}
}

// sampleUsers is the events of n of evs's users, spread over them: the
// users whose views a test compares one by one (the overview and rooms
// views count them all).
func sampleUsers(evs []chat.Event, n int) []chat.Event {
	users := map[string]bool{}
	for _, e := range evs {
		users[e.User] = true
	}
	every := max(len(users)/n, 1)
	var out []chat.Event
	seen := map[string]int{}
	for _, e := range evs {
		if _, ok := seen[e.User]; !ok {
			seen[e.User] = len(seen)
		}
		if seen[e.User]%every == 0 {
			out = append(out, e)
		}
	}
	return out
}

// starts sums chatpulse_group_partition_starts_total over the members, by
// how the partitions were started.
func starts(ms []*testMain) map[string]float64 {
	n := map[string]float64{}
	for _, tm := range ms {
		for _, how := range []string{"snapshot", "replay", "warm"} {
			n[how] += tm.metric(`chatpulse_group_partition_starts_total{how="` + how + `"}`)
		}
	}
	return n
}

// Losing the NATS node that leads the lease bucket (3 members on a 3-node
// cluster, everything at three replicas) while events and crossings flow:
// the bucket answers nothing until a new leader is elected, which can take
// longer than a lease, so the members' leases run out. Each member parks
// the partitions it lost and, once the bucket answers, gets them back and
// resumes them from where they stopped: no partition is rebuilt (loaded
// from a snapshot or replayed), every view is exact again, and every
// crossing is alerted exactly once.
func TestGroupLeaseLeaderLoss(t *testing.T) {
	cluster := natstest.StartCrashCluster(t)
	url := cluster.URL()
	c := newCrossingTraffic(t, url)
	c.group = "g"
	ms := startGroup(t, url, "g", 3, nil, append(c.args, "--replicas", "3")...)
	c.start(time.Now().UnixMilli())
	c.more(20)
	before := starts(ms)
	nc, _ := nats.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), "KV_CHATPULSE_GROUP_g")
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	lost := time.Now()
	lostNode := cluster.Index(leader)
	cluster.Crash(lostNode)
	// The lease bucket gets a new leader after an election timeout;
	// then the others notice the lost node's routes are dead.
	cluster.Ready("KV_CHATPULSE_GROUP_g")
	cluster.Gone(lostNode)
	c.more(20)
	waitComplete(t, ms[0], 3)
	c.more(20)
	evs := c.finish(ms)
	t.Logf("node %s, leading the lease bucket, lost: complete again, %d crossings later and caught up, after %v", leader, len(evs)/3, time.Since(lost).Round(time.Millisecond))
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(c.now, evs)
	for _, tm := range ms {
		tm.compareGroup(o, sampleUsers(evs, 20))
	}
	after := starts(ms)
	t.Logf("partition starts after the loss: %v warm, %v from snapshots, %v replayed", after["warm"]-before["warm"], after["snapshot"]-before["snapshot"], after["replay"]-before["replay"])
	if after["snapshot"] != before["snapshot"] || after["replay"] != before["replay"] {
		t.Errorf("partitions rebuilt after the loss of the lease bucket's leader: starts %v before, %v after", before, after)
	}
	for _, tm := range ms {
		if err := tm.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c.once("across the loss of the lease bucket's leader")
}

// A member paused (SIGSTOP) for twice the lease while crossings flow, and
// resumed (SIGCONT): its leases ran out, the others took its partitions
// over; it comes back to partitions whose validity it knows has ended
// (leases run on the monotonic clock, which went on while it was
// stopped), acts for none of them, and takes its share again. Every view
// is exact and every crossing alerted exactly once.
func TestGroupAlertsOnceAcrossAPausedMember(t *testing.T) {
	url := natstest.Start(t).URL()
	c := newCrossingTraffic(t, url)
	ms := startGroup(t, url, "g", 2, nil, c.args...)
	paused, pm := startBinary(t, append([]string{"--nats-url", url, "--group", "g", "--instance", "paused", "--partitions", "8"}, c.args...)...)
	waitComplete(t, ms[0], 3)
	c.start(time.Now().UnixMilli())
	c.more(20)
	if err := paused.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitComplete(t, ms[0], 2) // its keys ran out: the others own everything
	c.more(20)
	time.Sleep(time.Until(stopped.Add(2 * group.DefaultLease))) // the fault's length, not a wait for a result
	if err := paused.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitComplete(t, ms[0], 3)
	c.more(20)
	all := append([]*testMain{pm}, ms...)
	evs := c.finish(all)
	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(c.now, evs)
	for _, tm := range all {
		tm.compareGroup(o, sampleUsers(evs, 20))
	}
	if err := paused.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	paused.Wait()
	for _, tm := range ms {
		if err := tm.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c.once("across a member paused for twice the lease")
}
