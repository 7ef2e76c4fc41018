package main

// cpu measures what chatpulse costs per event at chat's pace, from outside
// the process, beside a bare nats.go subscriber process that receives the
// same events in the same run: the CPU time of each process (the sum of
// its threads' run time in /proc/<pid>/task/*/schedstat, nanoseconds, where
// /proc/<pid>/stat counts in 10 ms ticks) over the events it handled, after
// a warm-up. Events arrive paced: every millisecond, a thousandth of the
// second's events, as chat does, not in the saturating blasts of ingest,
// where every fixed cost per batch is shared by a thousand events.
// chatpulse runs in core mode against the NATS server that chatbench
// embeds, with its default windows and policies (or a policies file's).

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/traffic"
)

func cpuCmd(args []string) error {
	fs := flag.NewFlagSet("cpu", flag.ExitOnError)
	paces := fs.String("paces", "10000,50000,100000", "events per second, comma-separated, each in 1 ms ticks")
	seconds := fs.Duration("for", 15*time.Second, "how long each pace is measured, after its warm-up")
	warm := fs.Duration("warm", 3*time.Second, "warm-up of each pace, not measured")
	rounds := fs.Int("rounds", 2, "rounds over all the paces, alternating")
	rooms := fs.Int("rooms", 500, "rooms")
	users := fs.Int("users", 50_000, "users (Zipf)")
	joinEvery := fs.Int("join-every", 0, "one join (docs/contract.md section 12) after every N messages; 0: messages only")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	baseline := fs.String("baseline", "", "another chatpulse binary (an older build) to run beside it on the same events")
	policies := fs.String("policies", "", "a policies file for chatpulse (default: the default policies)")
	basePolicies := fs.String("baseline-policies", "", "a policies file for the baseline (default: -policies)")
	fs.Parse(args)
	if *basePolicies == "" {
		*basePolicies = *policies
	}
	var rates []float64
	for _, p := range strings.Split(*paces, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || r < 1000 {
			return fmt.Errorf("pace %q: want a number of events per second, at least 1000", p)
		}
		rates = append(rates, r)
	}

	dir, url, done, err := setUp("cpu", bin)
	if err != nil {
		return err
	}
	defer done()

	// The processes measured: chatpulse, the baseline build if any, and
	// the bare subscriber, last. The NATS server hands each message to its
	// subscribers in the order they subscribed, and that order shows: the
	// first of two processes of one binary measured 2-6% more CPU per
	// event than the second. So every round starts them afresh, each in
	// another place of the order than in the round before.
	var procs []measured
	for k, b := range []string{*bin, *baseline} {
		if b == "" {
			continue
		}
		args := []string{"--nats-url", url, "--jetstream=false", "--subject", "chat.>"}
		if p := []string{*policies, *basePolicies}[k]; p != "" {
			args = append(args, "--policies", p)
		}
		procs = append(procs, measured{filepath.Base(b), func() (counted, func(), error) {
			cp, err := startChatpulse(b, dir, args...)
			if err != nil {
				return counted{}, nil, err
			}
			return counted{pid: cp.cmd.Process.Pid, count: func() (int64, error) {
				m, err := scrape(cp.url + "/metrics")
				return int64(m["chatpulse_events_received_total"]), err
			}}, cp.stop, nil
		}})
	}
	procs = append(procs, measured{"bare", func() (counted, func(), error) {
		bare, err := startBare(url, "chat.>")
		if err != nil {
			return counted{}, nil, err
		}
		return bare.counted, bare.stop, nil
	}})
	var names []string
	for _, p := range procs {
		names = append(names, p.name)
	}
	joins := "messages only"
	if *joinEvery > 0 {
		joins = fmt.Sprintf("a join after every %d messages", *joinEvery)
	}
	shown := "default policies"
	if *policies != "" {
		shown = fmt.Sprintf("policies %s (baseline: %s)", *policies, *basePolicies)
	}
	fmt.Printf("%s: chatpulse in core NATS, default windows, %s, beside a bare nats.go subscriber; %d rooms, %d users (Zipf), %s, %v per pace after %v of warm-up; each round starts the processes afresh, in an order rotated by one\n\n",
		strings.Join(names, ", "), shown, *rooms, *users, joins, *seconds, *warm)

	pub, err := nats.Connect(url, nats.Name("chatbench-publisher"))
	if err != nil {
		return err
	}
	defer pub.Close()
	g := traffic.New(traffic.Config{Rooms: *rooms, Users: *users, Seed: 13, JoinEvery: *joinEvery})
	results := make([][]paceResult, len(rates))
	for round := range max(*rounds, 1) {
		order := rotated(len(procs), round)
		ps, stop, err := startInOrder(procs, order)
		if err != nil {
			return err
		}
		var started []string
		for _, i := range order {
			started = append(started, fmt.Sprintf("%s (pid %d)", names[i], ps[i].pid))
		}
		fmt.Printf("round %d: subscribed in this order: %s\n", round+1, strings.Join(started, ", "))
		var sent int64 // by this round's processes, which start from none
		for i, rate := range rates {
			r, err := measurePace(pub, g, rate, *warm, *seconds, &sent, ps...)
			if err != nil {
				stop()
				return err
			}
			fmt.Printf("round %d  %7.0f/s:", round+1, rate)
			for k, us := range r.cpu {
				fmt.Printf("  %s %5.2f µs/event", names[k], us)
			}
			fmt.Printf("  ratio %5.2fx  (%.0f events/s sent, %d measured)\n", r.ratio(0), r.sentRate, r.events)
			results[i] = append(results[i], r)
		}
		stop()
	}
	fmt.Printf("\n| pace | chatpulse CPU/event | bare subscriber CPU/event | ratio |")
	if *baseline != "" {
		fmt.Printf(" baseline CPU/event | baseline ratio |")
	}
	fmt.Printf("\n|---|---|---|---|%s\n", strings.Repeat("---|", 2*min(1, len(*baseline))))
	bareAt := len(procs) - 1
	for i, rate := range rates {
		fmt.Printf("| %s/s in 1 ms ticks | %s | %s | %s |", thousands(rate),
			spread(results[i], func(r paceResult) float64 { return r.cpu[0] }, "%.2f µs"),
			spread(results[i], func(r paceResult) float64 { return r.cpu[bareAt] }, "%.2f µs"),
			spread(results[i], func(r paceResult) float64 { return r.ratio(0) }, "%.2fx"))
		if *baseline != "" {
			fmt.Printf(" %s | %s |",
				spread(results[i], func(r paceResult) float64 { return r.cpu[1] }, "%.2f µs"),
				spread(results[i], func(r paceResult) float64 { return r.ratio(1) }, "%.2fx"))
		}
		fmt.Println()
	}
	fmt.Println("(medians of the rounds, and their range)")
	return nil
}

// paceResult is one measurement of one pace: CPU µs per event of each
// process, the bare subscriber's last.
type paceResult struct {
	cpu      []float64
	sentRate float64
	events   int64
}

// ratio is process k's CPU per event over the bare subscriber's.
func (r paceResult) ratio(k int) float64 { return r.cpu[k] / r.cpu[len(r.cpu)-1] }

// spread is the median of f over the results, and their range if there
// are more.
func spread[R any](rs []R, f func(R) float64, format string) string {
	var vs []float64
	for _, r := range rs {
		vs = append(vs, f(r))
	}
	slices.Sort(vs)
	s := fmt.Sprintf(format, vs[len(vs)/2])
	if len(vs) > 1 {
		s += fmt.Sprintf(" ("+format+"-"+format+")", vs[0], vs[len(vs)-1])
	}
	return s
}

func thousands(r float64) string { return strconv.FormatFloat(r/1000, 'f', -1, 64) + "k" }

// counted is a process that counts the events it handled.
type counted struct {
	pid   int
	count func() (int64, error)
}

// measurePace publishes at rate, in 1 ms ticks, for warm and then d, and
// returns each process's CPU per event over what it handled after the
// warm-up, up to the last event published. sent is the events published
// so far, over every pace.
func measurePace(pub *nats.Conn, g *traffic.Generator, rate float64, warm, d time.Duration, sent *int64, ps ...counted) (paceResult, error) {
	type mark struct {
		cpu   time.Duration
		count int64
	}
	read := func() ([]mark, error) {
		out := make([]mark, len(ps))
		for i, p := range ps {
			var err error
			if out[i].count, err = p.count(); err != nil {
				return nil, err
			}
			if out[i].cpu, err = runTime(p.pid); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var before []mark
	var readErr error
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	published := int64(0)
	for now := start; now.Sub(start) < warm+d; now = <-tick.C {
		if before == nil && now.Sub(start) >= warm {
			if before, readErr = read(); readErr != nil {
				return paceResult{}, readErr
			}
		}
		// What is due by now: rate/1000 a tick, and a late tick makes up
		// for those it missed.
		for due := int64(now.Sub(start).Seconds() * rate); published < due; published++ {
			subject, data, _, _, _ := g.Next(now)
			if err := pub.Publish(subject, data); err != nil {
				return paceResult{}, err
			}
		}
	}
	took := time.Since(start)
	if err := pub.Flush(); err != nil {
		return paceResult{}, err
	}
	*sent += published
	var after []mark
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if after, err = read(); err != nil {
			return paceResult{}, err
		}
		all := true
		for _, m := range after {
			all = all && m.count >= *sent
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			return paceResult{}, fmt.Errorf("pace %.0f/s: not every event arrived (%v of %d)", rate, after, *sent)
		}
	}
	r := paceResult{sentRate: float64(published) / took.Seconds(), events: after[0].count - before[0].count}
	for i := range ps {
		r.cpu = append(r.cpu, float64((after[i].cpu-before[i].cpu).Nanoseconds())/1e3/float64(after[i].count-before[i].count))
	}
	return r, nil
}

// runTime is the CPU time a process's threads have run so far, to the
// nanosecond: the first field of each /proc/<pid>/task/<tid>/schedstat.
func runTime(pid int) (time.Duration, error) {
	d, _, err := runStat(pid)
	return d, err
}

// runStat is runTime and how many times the process's threads were put on
// a CPU (schedstat's third field): its wake-ups, roughly.
func runStat(pid int) (time.Duration, int64, error) {
	s, err := readSchedstat(pid)
	return s.run, s.slices, err
}

// schedstat is what /proc/<pid>/task/*/schedstat says of a process's
// threads together: the time they ran, the time they waited, runnable,
// for a CPU (the machine's other work), and how many times they were put
// on one.
type schedstat struct {
	run, wait time.Duration
	slices    int64
}

func readSchedstat(pid int) (schedstat, error) {
	var s schedstat
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return s, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread has just exited
		}
		f := strings.Fields(string(b))
		if len(f) != 3 {
			return s, fmt.Errorf("schedstat of %d: %q", pid, b)
		}
		var n [3]int64
		for i := range n {
			if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
				return s, fmt.Errorf("schedstat of %d: %q", pid, b)
			}
		}
		s.run += time.Duration(n[0])
		s.wait += time.Duration(n[1])
		s.slices += n[2]
	}
	return s, nil
}

// bareProcess is a `chatbench bare-sub` or `bare-feed` child: asked over
// its stdin, it says over its stdout how many messages it has received.
type bareProcess struct {
	counted
	cmd    *exec.Cmd
	stages int // how many times it is delivered each event
}

func (b *bareProcess) stop() { b.cmd.Process.Kill(); b.cmd.Wait() }

func startBare(url, subject string) (*bareProcess, error) {
	return startCounting("bare-sub", url, subject)
}

// startCounting starts chatbench with args, a child that answers
// answerCounts, once it has subscribed.
func startCounting(args ...string) (*bareProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(out)
	b := &bareProcess{cmd: cmd, stages: 1}
	b.counted = counted{pid: cmd.Process.Pid, count: func() (int64, error) {
		if _, err := io.WriteString(in, "?\n"); err != nil {
			return 0, err
		}
		if !lines.Scan() {
			return 0, fmt.Errorf("bare subscriber: %v", lines.Err())
		}
		return strconv.ParseInt(lines.Text(), 10, 64)
	}}
	if _, err := b.count(); err != nil { // it answers once it has subscribed
		b.stop()
		return nil, err
	}
	return b, nil
}

// bareSubCmd is what a minimal consumer does: subscribe with core NATS and
// count the messages, nothing else.
func bareSubCmd(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: chatbench bare-sub URL SUBJECT")
	}
	nc, err := nats.Connect(args[0], nats.Name("chatbench-bare"))
	if err != nil {
		return err
	}
	defer nc.Close()
	var n atomic.Int64
	sub, err := nc.Subscribe(args[1], func(*nats.Msg) { n.Add(1) })
	if err != nil {
		return err
	}
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return err
	}
	return answerCounts(n.Load)
}

// answerCounts answers each line on stdin with the count so far.
func answerCounts(count func() int64) error {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(count())
	}
	return in.Err()
}

// measured is a process that chatbench cpu measures: its name, and how to
// start it, which returns what counts its events and what stops it.
type measured struct {
	name  string
	start func() (counted, func(), error)
}

// rotated is 0..n-1 rotated left by round: round mod n comes first.
func rotated(n, round int) []int {
	order := make([]int, n)
	for k := range order {
		order[k] = (round + k) % n
	}
	return order
}

// startInOrder starts the processes in the order given (indexes into ms),
// and returns them in their own order, with what stops them all.
func startInOrder(ms []measured, order []int) ([]counted, func(), error) {
	out := make([]counted, len(ms))
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, i := range order {
		c, s, err := ms[i].start()
		if err != nil {
			stop()
			return nil, nil, err
		}
		out[i] = c
		stops = append(stops, s)
	}
	return out, stop, nil
}
