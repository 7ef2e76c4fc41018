package natstest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/internal/wait"
)

// stream makes stream S with replicas on the servers at url, holding one
// message, and returns a client of it.
func stream(t *testing.T, url string, replicas int) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}, Replicas: replicas}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	return js
}

// A server stopped and started again listens where it did and keeps its
// streams.
func TestRestart(t *testing.T) {
	s := Start(t)
	js := stream(t, s.URL(), 1)
	s.Stop(0)
	s.Restart(0)
	wait.For(t, 10*time.Second, func() error {
		st, err := js.Stream(context.Background(), "S")
		if err != nil {
			return err
		}
		if n := st.CachedInfo().State.Msgs; n != 1 {
			return fmt.Errorf("stream S holds %d messages after the restart, want 1", n)
		}
		return nil
	})
}

// The leader of a stream at three replicas crashes: until the others
// elect another, Ready says a leader is missing; then one of them leads,
// and the crashed node, restarted on its store, is a current replica
// again.
func TestCrashAndRestart(t *testing.T) {
	c := StartCrashCluster(t)
	js := stream(t, c.URL(), 3)
	c.Ready("S")
	info := func() (*jetstream.StreamInfo, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "S")
		if err != nil {
			return nil, err
		}
		return s.CachedInfo(), nil
	}
	st, err := info()
	if err != nil {
		t.Fatal(err)
	}
	leader := st.Cluster.Leader
	lost := c.Index(leader)
	c.Crash(lost)
	// Ready says why not: the stream has no leader, or the cluster none
	// either, if the lost node led it too.
	if err := c.ready([]string{"S"}); err == nil || !strings.Contains(err.Error(), "leader") {
		t.Errorf("right after the stream's leader crashed: %v, want a leader missing", err)
	}
	c.Ready("S")
	c.Gone(lost)
	c.Restart(lost)
	wait.For(t, 30*time.Second, func() error {
		st, err := info()
		if err != nil {
			return err
		}
		cl := st.Cluster
		if cl.Leader == "" || cl.Leader == leader {
			return fmt.Errorf("stream S is led by %q", cl.Leader)
		}
		for _, r := range cl.Replicas {
			if r.Name == leader && r.Current {
				return nil
			}
		}
		return fmt.Errorf("%s, restarted, is not a current replica of S: %+v", leader, cl.Replicas)
	})
}
