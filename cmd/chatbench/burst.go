package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// burst is the flood bot of issue 20: one user in one room sends a burst
// of messages, each checked over HTTP and, when allowed, published to
// chat.<room>.<user>, as a chat server that asks before it posts does;
// under the default user_room_flood (10 per 10 s), how many get through,
// sent one after another and all at once. Read-only checks (the check
// alone decides nothing) beside consuming ones, on a standalone chatpulse
// and on a group of three on the same NATS server, checks spread over the
// members.
func burstCmd(args []string) error {
	fs := flag.NewFlagSet("burst", flag.ExitOnError)
	sizes := fs.String("sizes", "20,40,100,400", "burst sizes")
	members := fs.Int("members", 3, "members of the group")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	fs.Parse(args)
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			return fmt.Errorf("-sizes: %q is not a burst size", s)
		}
		ns = append(ns, n)
	}
	dir, url, done, err := setUp("burst", bin)
	if err != nil {
		return err
	}
	defer done()
	nc, err := nats.Connect(url, nats.Name("chatbench-burst"))
	if err != nil {
		return err
	}
	defer nc.Close()

	solo, err := startChatpulse(*bin, dir, "--nats-url", url, "--stream", "SOLO", "--subject", "solo.>", "--instance", "solo")
	if err != nil {
		return err
	}
	defer solo.stop()
	var group []*process
	for i := range *members {
		p, err := startChatpulse(*bin, dir, "--nats-url", url, "--stream", "GROUP", "--subject", "grp.>",
			"--group", "burst", "--partitions", "16", "--instance", fmt.Sprint("m", i))
		if err != nil {
			return err
		}
		defer p.stop()
		group = append(group, p)
	}
	if err := waitGroup(group[0].url, *members, time.Minute); err != nil {
		return err
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}}
	fmt.Println("allowed of a burst from one user in one room (user_room_flood: 10 per 10 s):")
	fmt.Printf("%-14s %-8s %12s %12s %12s %12s\n", "", "burst", "one by one", "in parallel", "consuming,", "consuming,")
	fmt.Printf("%-14s %-8s %12s %12s %12s %12s\n", "", "", "(read-only)", "(read-only)", "one by one", "in parallel")
	key := 0
	for _, target := range []struct {
		name    string
		prefix  string
		servers []*process
	}{{"standalone", "solo", []*process{solo}}, {fmt.Sprintf("group of %d", *members), "grp", group}} {
		for _, n := range ns {
			row := []int{}
			for _, c := range []struct{ consume, parallel bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
				key++ // a fresh user each time: nothing in its window
				got, err := floodBot(client, nc, target.servers, target.prefix, fmt.Sprint("bot-", key), n, c.consume, c.parallel)
				if err != nil {
					return err
				}
				row = append(row, got)
			}
			fmt.Printf("%-14s %-8d %12d %12d %12d %12d\n", target.name, n, row[0], row[1], row[2], row[3])
		}
	}
	return nil
}

// floodBot sends n messages from user in one room: each checked (over
// HTTP, spread over servers) and published when allowed; in parallel, all
// checks at once. It returns how many were allowed, once what was
// published is counted (a read-only check sees a message only then).
func floodBot(client *http.Client, nc *nats.Conn, servers []*process, prefix, user string, n int, consume, parallel bool) (int, error) {
	room := "flood"
	send := func(i int) (bool, error) {
		id := fmt.Sprintf("%s-%d", user, i)
		body := fmt.Sprintf(`{"room":%q,"user":%q,"text":"buy now %d"}`, room, user, i)
		if consume {
			body = fmt.Sprintf(`{"room":%q,"user":%q,"text":"buy now %d","consume":true,"id":%q}`, room, user, i, id)
		}
		resp, err := client.Post(servers[i%len(servers)].url+"/api/v1/throttle/check", "application/json", bytes.NewBufferString(body))
		if err != nil {
			return false, err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var a struct{ Allowed bool }
		if err := json.Unmarshal(data, &a); err != nil {
			return false, fmt.Errorf("check: %v: %s", err, data)
		}
		if a.Allowed {
			msg := fmt.Sprintf(`{"id":%q,"room":%q,"user":%q,"text":"buy now %d"}`, id, room, user, i)
			if _, err := nc.Request(prefix+"."+room+"."+user, []byte(msg), 5*time.Second); err != nil {
				return false, err
			}
		}
		return a.Allowed, nil
	}
	allowed := 0
	if !parallel {
		for i := range n {
			ok, err := send(i)
			if err != nil {
				return 0, err
			}
			if ok {
				allowed++
				// What a chat server's next message would see: the one
				// before counted.
				if err := waitCount(servers[0].url, room, user, allowed); err != nil {
					return 0, err
				}
			}
		}
		return allowed, nil
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			ok, err := send(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if ok {
				allowed++
			}
		})
	}
	close(start)
	wg.Wait()
	return allowed, first
}

// waitCount waits until a read-only check of the key counts n messages.
func waitCount(base, room, user string, n int) error {
	body := fmt.Sprintf(`{"room":%q,"user":%q}`, room, user)
	var last int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		resp, err := http.Post(base+"/api/v1/throttle/check", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		var a struct {
			Decisions []struct {
				Policy string
				Count  int64
			}
		}
		json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		for _, d := range a.Decisions {
			if d.Policy == "user_room_flood" {
				last = d.Count
			}
		}
		if last >= int64(n) {
			return nil
		}
	}
	return fmt.Errorf("%s in %s: %d messages counted after 10 s, want %d", user, room, last, n)
}
