package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Centrifugo as fanout's baseline: a real-time messaging server in Go
// that fans a publication out to every subscriber of a channel, which is
// what chatpulse's hub does with a view.

// publicationSize is the size of the JSON data of each publication: about
// a chatpulse overview frame.
const publicationSize = 1260

// findCentrifugo returns the centrifugo binary to use, or "" for none.
func findCentrifugo(flagValue string) string {
	if flagValue == "none" {
		return ""
	}
	if flagValue != "" {
		return flagValue
	}
	if p, err := exec.LookPath("centrifugo"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(gopath, "bin", "centrifugo"); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// runCentrifugo starts Centrifugo on port, publishes a publication a second
// on one channel (its as_of is when it was published), and measures n
// clients subscribed to it for d.
func runCentrifugo(bin string, port, n int, d time.Duration) (fanoutResult, error) {
	dir, err := os.MkdirTemp("", "chatbench-centrifugo")
	if err != nil {
		return fanoutResult{}, err
	}
	defer os.RemoveAll(dir)
	const key = "chatbench"
	config := fmt.Sprintf(`{
  "http_server": {"address": "127.0.0.1", "port": %d},
  "log": {"level": "error"},
  "usage_stats": {"disabled": true},
  "prometheus": {"enabled": true},
  "http_api": {"key": %q},
  "client": {"allow_anonymous_connect_without_token": true, "allowed_origins": ["*"]},
  "channel": {"without_namespace": {"allow_subscribe_for_anonymous": true, "allow_subscribe_for_client": true}}
}`, port, key)
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return fanoutResult{}, err
	}
	cmd := exec.Command(bin, "--config", path)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fanoutResult{}, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitHTTP(base+"/metrics", 10*time.Second); err != nil {
		return fanoutResult{}, err
	}

	stop := make(chan struct{})
	published := make(chan error, 1)
	go func() { published <- publishEverySecond(base+"/api/publish", key, stop) }()
	res, err := measureFanout(fanoutTarget{
		name:    "Centrifugo",
		ws:      fmt.Sprintf("ws://127.0.0.1:%d/connection/websocket", port),
		metrics: base + "/metrics",
		hello:   []string{`{"id":1,"connect":{}}`, `{"id":2,"subscribe":{"channel":"bench"}}`},
		frame:   centrifugoFrame,
	}, n, d)
	close(stop)
	if perr := <-published; err == nil {
		err = perr
	}
	return res, err
}

// publishEverySecond publishes to channel bench through Centrifugo's HTTP
// API until stop is closed.
func publishEverySecond(url, key string, stop <-chan struct{}) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
		asOf := time.Now().UTC().Format(time.RFC3339Nano)
		data := fmt.Sprintf(`{"as_of":%q,"pad":""}`, asOf)
		data = strings.Replace(data, `"pad":""`, `"pad":"`+strings.Repeat("x", publicationSize-len(data))+`"`, 1)
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"channel":"bench","data":`+data+`}`))
		req.Header.Set("X-API-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("publish: %s", resp.Status)
		}
	}
}

// centrifugoFrame reads a frame of Centrifugo's JSON protocol: replies and
// pushes, one per line. An empty object is a ping, answered with one.
func centrifugoFrame(b []byte) frameInfo {
	var f frameInfo
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if string(line) == "{}" {
			f.answer = []byte("{}")
			continue
		}
		var m struct {
			ID   int `json:"id"`
			Push *struct {
				Pub *struct {
					Data struct {
						AsOf time.Time `json:"as_of"`
					} `json:"data"`
				} `json:"pub"`
			} `json:"push"`
		}
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if m.ID == 2 {
			f.ready = true // subscribed
		}
		if m.Push != nil && m.Push.Pub != nil {
			f.data++
			f.asOf = append(f.asOf, m.Push.Pub.Data.AsOf)
		}
	}
	return f
}

// waitHTTP waits until url answers 200.
func waitHTTP(url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not answering after %v", url, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
