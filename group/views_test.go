package group

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/group/internal/fake"
	"github.com/chatpulse/chatpulse/group/lease"
	"github.com/chatpulse/chatpulse/throttle"
)

// During a handoff a check's stage may have no caught-up owner: the check
// then says it is incomplete and allows or denies as --throttle-unowned
// says, read-only or consuming, and whatever the policies would say.
func TestCheckUnowned(t *testing.T) {
	policies := []throttle.Policy{
		{Name: "room_p", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgSlidingWindow, Limit: 5, Window: time.Minute, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce},
		{Name: "user_p", Scope: throttle.ScopeUser, Algorithm: throttle.AlgSlidingWindow, Limit: 5, Window: time.Minute, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce},
	}
	for _, c := range []struct {
		unowned string
		allowed bool
	}{{"", true}, {UnownedAllow, true}, {UnownedDeny, false}} {
		// A member that owns nothing and knows no owner: every partition
		// is missing, and nobody is asked.
		r, err := newRules(policies)
		if err != nil {
			t.Fatal(err)
		}
		m := &Member{cfg: Config{Partitions: 8, Unowned: c.unowned}, metrics: &metrics{count: map[string]*[3]uint64{}}}
		m.rules.Store(r)
		m.leases = lease.New(fake.NewKV(fake.NewClock(), time.Hour, &fake.Trace{}), lease.Config{Self: lease.Member{Instance: "a"}, Slots: 8, TTL: time.Hour, Hand: hand{m}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		q := throttle.Query{Room: "lobby", User: "alice"}
		for name, res := range map[string]throttle.Result{
			"check":   m.Check(1000, q),
			"consume": m.Consume(1000, q, "id-1"),
		} {
			if res.Allowed != c.allowed || res.Coverage == nil || res.Coverage.Complete || res.Coverage.MissingPartitions != 2 {
				t.Errorf("--throttle-unowned %q, %s: allowed %v, coverage %+v; want allowed %v, 2 partitions missing", c.unowned, name, res.Allowed, res.Coverage, c.allowed)
			}
			if name == "consume" && (res.Consumed == nil || *res.Consumed) {
				t.Errorf("--throttle-unowned %q: consumed %v without an owner to record it", c.unowned, res.Consumed)
			}
		}
	}
}
