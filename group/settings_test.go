package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/internal/natstest"
)

// openBus connects to the server at url as a member does.
func openBus(t testing.TB, url string) *bus.Bus {
	t.Helper()
	b, err := bus.Open(bus.Options{URL: url, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// Two members with different partition counts: the second is refused.
func TestPartitionsAgree(t *testing.T) {
	b := openBus(t, natstest.Start(t).URL())
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
