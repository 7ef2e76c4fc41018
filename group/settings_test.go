package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/chatpulse/chatpulse/bus"
)

func startServer(t testing.TB) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// openBus connects to ns as a member does.
func openBus(t testing.TB, ns *server.Server) *bus.Bus {
	t.Helper()
	b, err := bus.Open(bus.Options{URL: ns.ClientURL(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// Two members with different partition counts: the second is refused.
func TestPartitionsAgree(t *testing.T) {
	b := openBus(t, startServer(t))
	ctx := context.Background()
	if err := agree(ctx, b, "g", settings{Partitions: 64, Windows: "1m"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := agree(ctx, b, "g", settings{Partitions: 64, Windows: "1m"}, 1); err != nil {
		t.Fatal(err)
	}
	err := agree(ctx, b, "g", settings{Partitions: 32, Windows: "1m"}, 1)
	if !errors.Is(err, ErrPartitions) || err.Error() != fmt.Sprintf("%v: --partitions 32, but group g uses 64", ErrPartitions) {
		t.Fatalf("err = %v", err)
	}
}
