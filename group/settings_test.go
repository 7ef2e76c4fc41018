package group

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/chatpulse/chatpulse/internal/natstest"
)

// Two members with different partition counts: the second is refused.
func TestPartitionsAgree(t *testing.T) {
	b := natstest.Bus(t, natstest.Start(t).URL())
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
