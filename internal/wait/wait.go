// Package wait is how chatpulse's tests wait for something asynchronous to
// become true: a message delivered, a partition taken over, a metric
// moved. The condition says why it is not true yet, so that a test that
// times out says what it was waiting for and what it saw last (as
// nats-server's checkFor does).
//
// It is for waiting, never for asserting speed: the timeout is a bound on
// a broken run, not a measurement.
package wait

import (
	"testing"
	"time"
)

// poll is how often a condition is tried again.
const poll = 10 * time.Millisecond

// For calls cond until it returns nil, and fails t with cond's last error
// if it has not within timeout.
func For(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Until(timeout, cond); err != nil {
		t.Fatalf("after %v: %v", timeout, err)
	}
}

// Until calls cond until it returns nil or timeout has passed, and returns
// its last error (nil once it held). It is For where a failure is not the
// end of the test: a benchmark, a helper that reports it otherwise.
func Until(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(poll)
	}
}
