package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/internal/wait"
)

// TestServingWhileStarting asks for /readyz and a view from the moment the
// HTTP port is bound, while Run is still starting: whatever a handler reads
// must be built before the server serves. Under -race it fails if Run
// assigns something a handler or a NATS callback reads after they can run.
func TestServingWhileStarting(t *testing.T) {
	url := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	m := NewMain()
	m.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	args := []string{"--http", url[len("http://"):], "--nats-listen", "127.0.0.1:0", "--data-dir", t.TempDir()}
	if err := m.ParseFlags(args, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		answered atomic.Int64
	)
	for _, path := range []string{"/readyz", "/api/v1/overview"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 2 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, err := client.Get(url + path); err == nil {
					resp.Body.Close()
					answered.Add(1)
				}
			}
		}()
	}
	err := m.Run(context.Background())
	defer m.Close()
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		if n := answered.Load(); n <= 10 {
			return fmt.Errorf("%d answers, want more than 10", n)
		}
		return nil
	})
	close(stop)
	wg.Wait()
}
