package bus

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A making refused for want of places, or of a meta leader, is tried
// again until it is not;
// any other answer is returned at once. (The refusal itself comes of a
// race in a cluster's start, which a test cannot bring about at will;
// natstest's cluster start waits it out, and TestGroupLeaseLeaderLoss met
// it before.)
func TestPlacedTriesAgainOnlyForPlaces(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	noPeers := &jetstream.APIError{Code: 400, ErrorCode: codeNoPeers, Description: "no suitable peers for placement, peer offline"}
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: codeUnavailable, Description: "JetStream system temporarily unavailable"}
	other := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse, Description: "stream name already in use"}
	for _, c := range []struct {
		answers []error
		tries   int
		want    error
	}{
		{[]error{noPeers, unavailable, nil}, 3, nil},
		{[]error{noPeers, other}, 2, other},
		{[]error{other}, 1, other},
		{[]error{nil}, 1, nil},
	} {
		tries := 0
		_, err := placed(context.Background(), log, "S", func() (int, error) {
			tries++
			return 0, c.answers[tries-1]
		})
		if tries != c.tries || !errors.Is(err, c.want) {
			t.Errorf("answers %v: %d tries, %v; want %d, %v", c.answers, tries, err, c.tries, c.want)
		}
	}
}
