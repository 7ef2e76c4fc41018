package group

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/group/internal/fake"
	"github.com/chatpulse/chatpulse/group/lease"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/throttle"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// askingB is member a of a group whose every partition b owns, caught
// up, as a's leases say. b is respond, a responder on a real NATS server
// that a asks.
func askingB(t *testing.T, unowned string, respond func(q question) answer) *Member {
	t.Helper()
	return askingBWith(t, unowned, []throttle.Policy{
		{Name: "room_p", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgSlidingWindow, Limit: 5, Window: time.Minute, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce},
		{Name: "user_p", Scope: throttle.ScopeUser, Algorithm: throttle.AlgSlidingWindow, Limit: 5, Window: time.Minute, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce},
	}, respond)
}

// askingBWith is askingB with policies of its own.
func askingBWith(t *testing.T, unowned string, policies []throttle.Policy, respond func(q question) answer) *Member {
	t.Helper()
	url := natstest.Start(t).URL()
	const partitions = 4
	r, err := newRules(policies)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := &Member{cfg: Config{Group: "g", Partitions: partitions, Unowned: unowned}, bus: natstest.Bus(t, url), log: log, closing: make(chan struct{}),
		metrics: &metrics{count: map[string]*[3]uint64{}}, unconsumeFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "failed"})}
	m.cfg.Instance = "a"
	m.rules.Store(r)
	t.Cleanup(func() { close(m.closing); m.undos.Wait() })

	kv := fake.NewKV(fake.NewClock(), time.Hour, &fake.Trace{})
	kv.Steal("member.b", []byte(`{"instance":"b"}`))
	for p := range partitions {
		kv.Steal("owner."+strconv.Itoa(p), []byte(`{"instance":"b","ready":true}`))
	}
	m.leases = lease.New(kv, lease.Config{Self: lease.Member{Instance: "a"}, Slots: partitions, TTL: time.Hour, Hand: hand{m}, Log: log})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); m.leases.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	wait.For(t, 10*time.Second, func() error {
		if n := len(m.leases.Table().Owners); n != partitions {
			return fmt.Errorf("%d owners known", n)
		}
		return nil
	})

	sub, err := natstest.Bus(t, url).Answer(bus.GroupQuery("g", "b"), func(data []byte) []byte {
		var q question
		json.Unmarshal(data, &q)
		out, _ := json.Marshal(respond(q))
		return out
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	wait.For(t, 10*time.Second, func() error { // b's subscription has reached the server
		_, err := m.bus.Ask(t.Context(), bus.GroupQuery("g", "b"), []byte(`{}`))
		return err
	})
	return m
}

// A consuming check that a later stage denies has the earlier stage take
// back its hit. The undo is confirmed when that stage's owner answers for
// its partition; one it does not confirm (here: the owner answers that it
// no longer holds the partition) is tried again, twice, then logged and
// counted.
func TestUnconsumeConfirmedOrCounted(t *testing.T) {
	for _, c := range []struct {
		name     string
		confirm  bool
		attempts int32
		failed   float64
	}{{"confirmed", true, 1, 0}, {"never confirmed", false, 3, 1}} {
		t.Run(c.name, func(t *testing.T) {
			// b allows and records at the room stage, denies at the user
			// stage, and confirms an undo or not.
			var undos atomic.Int32
			m := askingB(t, "", func(q question) answer {
				a := answer{Parts: q.Parts, AsOf: q.Now}
				switch {
				case q.Op == opConsume && q.Stage == stageRoom:
					a.Allowed, a.Recorded, a.Consumed = true, true, true
				case q.Op == opConsume:
					a.Decisions = []throttle.Decision{{Policy: "user_p", Mode: throttle.ModeEnforce}}
				case q.Op == opUnconsume:
					undos.Add(1)
					if a.Undone = c.confirm; !c.confirm {
						a.Parts = []int{} // it holds the partition no more
					}
				}
				return a
			})
			res := m.Consume(1000, throttle.Query{Room: "lobby", User: "alice"}, "m-1")
			if res.Allowed || *res.Consumed {
				t.Fatalf("allowed %v, consumed %v: want denied by the user stage", res.Allowed, *res.Consumed)
			}
			wait.For(t, 10*time.Second, func() error {
				if n, f := undos.Load(), testutil.ToFloat64(m.unconsumeFailed); n != c.attempts || f != c.failed {
					return fmt.Errorf("undos asked %d, failed %v; want %d, %v", n, f, c.attempts, c.failed)
				}
				return nil
			})
			close(m.closing)
			m.undos.Wait()
			m.closing = make(chan struct{}) // for the cleanup
			if n := undos.Load(); n != c.attempts {
				t.Errorf("undos asked %d in all, want %d", n, c.attempts)
			}
		})
	}
}

// An owner that answers that it does not hold a stage's partition (it let
// it go since the asker looked) leaves that stage missing: a consuming
// check then allows or denies as --throttle-unowned says, as if no owner
// were known. It is not a denial of the policies.
func TestConsumeOwnerLetGo(t *testing.T) {
	for _, c := range []struct {
		unowned string
		allowed bool
	}{{UnownedAllow, true}, {UnownedDeny, false}} {
		m := askingB(t, c.unowned, func(q question) answer {
			a := answer{Parts: q.Parts, AsOf: q.Now, Allowed: true}
			if q.Stage == stageRoom {
				a = answer{Parts: []int{}, AsOf: q.Now}
			}
			return a
		})
		res := m.Consume(1000, throttle.Query{Room: "lobby", User: "alice"}, "m-1")
		if res.Allowed != c.allowed || res.Coverage.Complete || res.Coverage.MissingPartitions != 1 {
			t.Errorf("--throttle-unowned %s: allowed %v, coverage %+v; want %v, one partition missing", c.unowned, res.Allowed, res.Coverage, c.allowed)
		}
	}
}

// A join's consuming check is asked of the owner of its room stage alone,
// as a join (opJoin, which a member that does not know joins refuses
// rather than decide a message), and answered as that owner decides; with
// no policy that locks, nobody is asked and it is allowed.
func TestConsumeJoinAsksTheRoomStage(t *testing.T) {
	room := throttle.Policy{Name: "room_p", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgSlidingWindow, Limit: 5, Window: time.Minute, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce}
	user := throttle.Policy{Name: "user_p", Scope: throttle.ScopeUser, Algorithm: throttle.AlgSlidingWindow, Limit: 5, Window: time.Minute, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce}
	raid := throttle.Policy{Name: "raid", Scope: throttle.ScopeRoom, Algorithm: throttle.AlgJoinWave, Limit: 3, Window: time.Minute, Resolution: throttle.DefaultResolution, Mode: throttle.ModeEnforce,
		Act: []throttle.ActKind{throttle.ActLock}, LockFor: time.Minute}
	join := throttle.Query{Room: "lobby", User: "bot", Kind: chat.KindJoin}
	var asked []string
	var mu sync.Mutex
	respond := func(q question) answer {
		if q.Op == "" {
			return answer{} // askingBWith's probe
		}
		mu.Lock()
		asked = append(asked, fmt.Sprint(q.Op, " ", q.Stage, " ", q.ID))
		mu.Unlock()
		return answer{Parts: q.Parts, AsOf: q.Now, Decisions: []throttle.Decision{{Policy: "raid", Mode: throttle.ModeEnforce}}}
	}
	m := askingBWith(t, "", []throttle.Policy{room, user, raid}, respond)
	if res := m.Consume(1000, join, "j-1"); res.Allowed || *res.Consumed || len(res.Decisions) != 1 || res.Decisions[0].Policy != "raid" {
		t.Errorf("a join the lock refuses: %+v, want refused by raid", res)
	}
	if fmt.Sprint(asked) != "[join room j-1]" {
		t.Errorf("asked %q, want the room stage alone, as a join", asked)
	}

	asked = nil
	m = askingBWith(t, "", []throttle.Policy{room, user}, respond)
	if res := m.Consume(1000, join, "j-2"); !res.Allowed || !*res.Consumed || len(asked) != 0 {
		t.Errorf("a join with no policy that locks: %+v, asked %q; want allowed, nobody asked", res, asked)
	}
}
