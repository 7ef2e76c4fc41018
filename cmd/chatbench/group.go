package main

// group measures what a group of members costs beside one standalone
// instance on the same events, in one run against one NATS server: CPU
// seconds per event of each process, read from /proc (from outside, as an
// operator sees it), and beside them what NATS's delivery alone costs
// processes that read the events as they do (bare.go); then how long a
// group takes, after a member is killed with SIGKILL, to answer exactly
// again; and the latency of a view asked of a member that owns nothing
// the view needs, beside the same view from the standalone instance.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/group"
	"github.com/chatpulse/chatpulse/traffic"
)

func groupCmd(args []string) error {
	fs := flag.NewFlagSet("group", flag.ExitOnError)
	n := fs.Int("n", 200_000, "events")
	rate := fs.Float64("rate", 10_000, "events per second, paced in 1 ms ticks (0: as fast as the stream acknowledges)")
	rooms := fs.Int("rooms", 1000, "rooms")
	users := fs.Int("users", 50_000, "users (Zipf)")
	members := fs.Int("members", 3, "members of the group")
	partitions := fs.Int("partitions", 64, "partitions")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	cluster := fs.Bool("cluster", false, "a 3-node NATS cluster instead of one server, every stream and bucket at 3 replicas, each process on a node of its own")
	floor := fs.Bool("bare", true, "then the same events to bare consumers, laid out as the standalone instance's and the members' feeds, that only count them")
	fs.Parse(args)

	dir, url, done, err := setUp("group", bin)
	if err != nil {
		return err
	}
	defer done()
	// node is the NATS server of the i'th process (the standalone one is
	// -1), and replicas what they all create.
	node, replicas := func(int) string { return url }, "1"
	if *cluster {
		urls, stop, err := startCluster(dir)
		if err != nil {
			return err
		}
		defer stop()
		url, replicas = urls[0], "3"
		node = func(i int) string { return urls[(i+len(urls))%len(urls)] }
	}

	// The events, made before any clock starts: their payloads, rooms
	// and users.
	g := traffic.New(traffic.Config{Rooms: *rooms, Users: *users, Seed: 3})
	evs := make([]benchEvent, *n)
	distinct := map[string]bool{}
	now := time.Now()
	for i := range evs {
		var good bool
		_, evs[i].data, evs[i].room, evs[i].user, good = g.Next(now)
		for !good {
			_, evs[i].data, evs[i].room, evs[i].user, good = g.Next(now)
		}
		distinct[evs[i].user] = true
	}
	pace := fmt.Sprintf("%.0f events/s in 1 ms ticks", *rate)
	if *rate <= 0 {
		pace = "as fast as the stream acknowledges"
	}
	where := "one NATS server"
	if *cluster {
		where = "a 3-node NATS cluster, 3 replicas"
	}
	fmt.Printf("%d events, %d rooms, %d users (%d distinct in the trace), %s, %d partitions, %s\n\n",
		*n, *rooms, *users, len(distinct), pace, *partitions, where)

	// Standalone.
	solo, err := startChatpulse(*bin, dir, "--nats-url", node(-1), "--replicas", replicas, "--stream", "SOLO", "--subject", "solo.>")
	if err != nil {
		return err
	}
	defer solo.stop()
	soloUse, soloTime, err := feed(url, "solo", evs, *rate, pids([]*process{solo}), counts(solo, int64(len(evs)), len(distinct)))
	if err != nil {
		return err
	}
	soloCPU := soloUse[0].cpu
	fmt.Printf("standalone:  %.2f µs CPU/event, %.2f wake-ups/event (%.1f s to take %d events in)\n",
		perEvent(soloCPU, len(evs)), soloUse[0].perEvent(len(evs)), soloTime.Seconds(), len(evs))

	// The group.
	var mem []*process
	for i := range *members {
		p, err := startChatpulse(*bin, dir, "--nats-url", node(i), "--replicas", replicas, "--stream", "GROUP", "--subject", "grp.>",
			"--group", "bench", "--partitions", strconv.Itoa(*partitions), "--instance", fmt.Sprint("m", i))
		if err != nil {
			return err
		}
		defer p.stop()
		mem = append(mem, p)
	}
	if err := waitGroup(mem[0].url, *members, time.Minute); err != nil {
		return err
	}
	still, err := idle(append([]*process{solo}, mem...))
	if err != nil {
		return err
	}
	fmt.Printf("idle, no events: standalone %.1f ms CPU/s;", still[0]*1e3)
	for i, c := range still[1:] {
		fmt.Printf(" m%d %.1f ms/s", i, c*1e3)
	}
	fmt.Println()
	use, groupTime, err := feed(url, "grp", evs, *rate, pids(mem), counts(mem[0], int64(len(evs)), len(distinct)))
	if err != nil {
		return err
	}
	total, busiest := 0.0, 0.0
	for i, u := range use {
		fmt.Printf("member m%d:   %.2f µs CPU/event, %.2f wake-ups/event\n", i, perEvent(u.cpu, len(evs)), u.perEvent(len(evs)))
		total += u.cpu
		busiest = max(busiest, u.cpu)
	}
	fmt.Printf("group of %d: %.2f µs CPU/event in all (%.2fx standalone), busiest member %.2f µs (%.2fx); %.1f s to take the events in\n\n",
		*members, perEvent(total, len(evs)), total/soloCPU, perEvent(busiest, len(evs)), busiest/soloCPU, groupTime.Seconds())
	if *floor {
		n, _ := strconv.Atoi(replicas)
		if err := bareFloor(url, node, n, evs, *rate, *members, *partitions); err != nil {
			return err
		}
	}

	// View latency from a member that owns nothing the view needs: a room
	// of another member's, beside the same view of the standalone one.
	var st groupStatus
	if err := getJSON(mem[0].url+"/api/v1/group", &st); err != nil {
		return err
	}
	room := ""
	for r := range *rooms {
		name := fmt.Sprintf("room-%d", r)
		owner := st.owner(group.Partition(chat.Token(name), *partitions))
		if owner != "" && owner != "m0" {
			room = name
			break
		}
	}
	if room == "" {
		return fmt.Errorf("no room owned by another member than m0")
	}
	for _, v := range []struct{ name, url string }{{"standalone", solo.url}, {"group, m0 (not the owner)", mem[0].url}} {
		lat, err := latencies(v.url+"/api/v1/rooms/"+room+"?window=1h", 1000)
		if err != nil {
			return err
		}
		p := percentiles(lat, 0.5, 0.99)
		fmt.Printf("room view, %s: p50 %s, p99 %s\n", v.name, ms(p[0]), ms(p[1]))
	}
	for _, v := range []struct{ name, url string }{{"standalone", solo.url}, {"group, m0", mem[0].url}} {
		lat, err := latencies(v.url+"/api/v1/overview?window=1h", 300)
		if err != nil {
			return err
		}
		p := percentiles(lat, 0.5, 0.99)
		fmt.Printf("overview, %s: p50 %s, p99 %s\n", v.name, ms(p[0]), ms(p[1]))
	}

	// SIGKILL a member: how long until the others answer exactly again.
	var before struct {
		Messages      int64 `json:"messages"`
		DistinctUsers int   `json:"distinct_users"`
	}
	if err := getJSON(mem[0].url+"/api/v1/overview?window=1h", &before); err != nil {
		return err
	}
	victim := mem[len(mem)-1]
	killed := time.Now()
	victim.cmd.Process.Signal(syscall.SIGKILL)
	victim.cmd.Wait()
	var incomplete time.Duration
	for deadline := killed.Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no exact answer 2 minutes after the SIGKILL")
		}
		var v struct {
			Messages      int64 `json:"messages"`
			DistinctUsers int   `json:"distinct_users"`
			Complete      bool  `json:"complete"`
		}
		if getJSON(mem[0].url+"/api/v1/overview?window=1h", &v) != nil {
			continue
		}
		if !v.Complete && incomplete == 0 {
			incomplete = time.Since(killed)
		}
		if v.Complete && v.Messages == before.Messages && v.DistinctUsers == before.DistinctUsers && incomplete > 0 {
			break
		}
	}
	fmt.Printf("\nSIGKILL of a member: views said complete:false after %v, and were exact again after %v (lease %v, plus the replay of its partitions)\n",
		incomplete.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), group.DefaultLease)
	return nil
}

// feed publishes evs under prefix.<room>.<user>, paced, and returns each
// process's usage from the first event until done says they have all
// been taken in.
func feed(url, prefix string, evs []benchEvent, rate float64, pids []int, done func() (bool, error)) ([]usage, time.Duration, error) {
	nc, err := nats.Connect(url, nats.Name("chatbench-group"))
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	before, err := usages(pids)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	perTick := max(1, int(rate/1000))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	if rate <= 0 { // unpaced: the async publishes' limit is the pace
		perTick = len(evs)
	}
	for i := 0; i < len(evs); {
		if rate > 0 {
			<-tick.C
		}
		for end := min(len(evs), i+perTick); i < end; i++ {
			e := &evs[i]
			subject := prefix + "." + chat.Token(e.room) + "." + chat.Token(e.user)
			for {
				_, err := js.PublishAsync(subject, e.data)
				if err == nil {
					break
				}
				if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
					return nil, 0, err
				}
				<-js.PublishAsyncComplete() // the server is behind: let it catch up
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return nil, 0, fmt.Errorf("publishes not acknowledged")
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		ok, err := done()
		if err != nil {
			return nil, 0, err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("not every event counted")
		}
	}
	took := time.Since(start)
	after, err := usages(pids)
	if err != nil {
		return nil, 0, err
	}
	for i := range after {
		after[i] = usage{after[i].cpu - before[i].cpu, after[i].wakeUps - before[i].wakeUps}
	}
	return after, took, nil
}

type groupStatus struct {
	Complete bool `json:"complete"`
	Members  []struct {
		Instance   string `json:"instance"`
		Partitions []int  `json:"partitions"`
	} `json:"members"`
}

// owner is the member that owns partition p.
func (s *groupStatus) owner(p int) string {
	for _, m := range s.Members {
		for _, q := range m.Partitions {
			if q == p {
				return m.Instance
			}
		}
	}
	return ""
}

func waitGroup(url string, members int, d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		var st groupStatus
		if getJSON(url+"/api/v1/group", &st) == nil && st.Complete && len(st.Members) == members {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group did not become complete")
		}
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func latencies(url string, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		resp, err := http.Get(url)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		out = append(out, time.Since(start))
	}
	return out, nil
}
