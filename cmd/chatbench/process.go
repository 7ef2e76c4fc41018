package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// idle is each process's CPU seconds per second over the same 2 s with no
// events.
func idle(ps []*process) ([]float64, error) {
	before, err := usages(pids(ps))
	if err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second)
	after, err := usages(pids(ps))
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(ps))
	for i := range ps {
		out[i] = (after[i].cpu - before[i].cpu) / 2
	}
	return out, nil
}

type benchEvent struct {
	data       []byte
	room, user string
}

func perEvent(cpuSeconds float64, n int) float64 { return cpuSeconds / float64(n) * 1e6 }

// process is a chatpulse binary running.
type process struct {
	cmd *exec.Cmd
	url string
}

func (p *process) stop() { p.cmd.Process.Kill(); p.cmd.Wait() }

// cpu is the process's CPU seconds so far (runTime: to the nanosecond,
// where /proc/<pid>/stat counts in 10 ms ticks).
func (p *process) cpu() (float64, error) {
	d, err := runTime(p.cmd.Process.Pid)
	return d.Seconds(), err
}

// usage is what a process used: CPU seconds, and how many times its
// threads were put on a CPU (its wake-ups, roughly).
type usage struct {
	cpu     float64
	wakeUps int64
}

func (u usage) perEvent(n int) float64 { return float64(u.wakeUps) / float64(n) }

// usages are the processes' usage so far, from one read of each.
func usages(pids []int) ([]usage, error) {
	out := make([]usage, len(pids))
	for i, pid := range pids {
		d, n, err := runStat(pid)
		if err != nil {
			return nil, err
		}
		out[i] = usage{d.Seconds(), n}
	}
	return out, nil
}

func startChatpulse(bin, dir string, args ...string) (*process, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, append([]string{"--http", addr, "--data-dir", filepath.Join(dir, "unused")}, args...)...)
	if d := os.Getenv("CHATBENCH_STDERR"); d != "" { // each chatpulse's log in a file of this directory: where its time went
		f, _ := os.CreateTemp(d, "chatpulse-*.log")
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, url: "http://" + addr}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("chatpulse %v not ready", args)
		}
	}
}

// pids are the processes' ids.
func pids(ps []*process) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.cmd.Process.Pid
	}
	return out
}

// counts is done when the first process's views count every event
// (messages and distinct users of the 1h window).
func counts(p *process, messages int64, users int) func() (bool, error) {
	return func() (bool, error) {
		var v struct {
			Messages      int64 `json:"messages"`
			DistinctUsers int   `json:"distinct_users"`
		}
		err := getJSON(p.url+"/api/v1/overview?window=1h", &v)
		return err == nil && v.Messages == messages && v.DistinctUsers == users, nil
	}
}
