package wait

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsOnceTrue(t *testing.T) {
	n := 0
	err := Until(time.Minute, func() error {
		if n++; n < 3 {
			return fmt.Errorf("tried %d times", n)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Until: %v after %d tries, want nil after 3", err, n)
	}
}

func TestUntilGivesTheLastReason(t *testing.T) {
	n := 0
	err := Until(0, func() error { n++; return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "not yet") || n != 1 {
		t.Fatalf("Until with no time: %v after %d tries, want the condition's error after 1", err, n)
	}
}
