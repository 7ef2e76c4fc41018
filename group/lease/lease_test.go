package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/proxy"
	"github.com/chatpulse/chatpulse/internal/wait"
)

const testTTL = time.Second

// tracker checks that no partition is ever started by two members at once,
// and that a member stops answering for a partition before another starts
// it.
type tracker struct {
	t      *testing.T
	mu     sync.Mutex
	active map[int]run // partition -> who runs it
	starts int
	byWho  map[string]*Loop
}

type run struct {
	member string
	claim  uint64
}

type fakeHand struct {
	tr   *tracker
	name string
	l    *Loop
}

func (h *fakeHand) Start(p int, claim uint64) {
	tr := h.tr
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if other, ok := tr.active[p]; ok {
		tr.t.Errorf("partition %d started by %s while %s runs it", p, h.name, other.member)
	}
	now := time.Now()
	for name, l := range tr.byWho {
		if name != h.name && l.Table().Owns(p, now) {
			tr.t.Errorf("partition %d started by %s while %s still answers for it", p, h.name, name)
		}
	}
	tr.active[p] = run{h.name, claim}
	tr.starts++
	h.l.CaughtUp(p, claim) // caught up at once
}

func (h *fakeHand) Stop(p int, claim uint64, _ bool) {
	tr := h.tr
	tr.mu.Lock()
	defer tr.mu.Unlock()
	a, ok := tr.active[p]
	if !ok || a.member != h.name || a.claim != claim {
		return // stopped already, by the other of the loop and the timer, or not ours
	}
	delete(tr.active, p)
}

type member struct {
	l      *Loop
	b      *bus.Bus
	cancel context.CancelFunc
	done   chan struct{}
}

// startMember starts member name's lease loop through the server at url.
func startMember(t *testing.T, url string, tr *tracker, name string, partitions int) *member {
	t.Helper()
	b := natstest.Bus(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := Open(ctx, b, "test", 1, testTTL)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHand{tr: tr, name: name}
	l := New(kv, Config{Self: Member{Instance: name}, Slots: partitions, TTL: testTTL, Hand: h, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h.l = l
	tr.mu.Lock()
	tr.byWho[name] = l
	tr.mu.Unlock()
	if err := l.Join(ctx); err != nil {
		t.Fatal(err)
	}
	m := &member{l: l, b: b, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		l.Run(ctx)
	}()
	t.Cleanup(func() { m.cancel(); <-m.done })
	return m
}

// converged waits until every partition is held, ready, by the member
// rendezvous hashing gives it to among names.
func converged(t *testing.T, tr *tracker, ms map[string]*member, partitions int) {
	t.Helper()
	names := make([]string, 0, len(ms))
	for n := range ms {
		names = append(names, n)
	}
	wait.For(t, 15*time.Second, func() error {
		now := time.Now()
		for p := range partitions {
			if want := OwnerOf(p, names); !ms[want].l.Table().Owns(p, now) {
				return fmt.Errorf("partition %d: %s, its owner among %v, does not answer for it", p, want, names)
			}
		}
		tr.mu.Lock()
		running := len(tr.active)
		tr.mu.Unlock()
		if running != partitions {
			return fmt.Errorf("%d of %d partitions running on %v", running, partitions, names)
		}
		return nil
	})
}

func TestLeasesConvergeAndFailOver(t *testing.T) {
	const partitions = 16
	url := natstest.Start(t).URL()
	tr := &tracker{t: t, active: map[int]run{}, byWho: map[string]*Loop{}}
	ms := map[string]*member{}
	for _, name := range []string{"a", "b", "c"} {
		ms[name] = startMember(t, url, tr, name, partitions)
	}
	converged(t, tr, ms, partitions)

	// b leaves cleanly: by the time its loop returns it has deleted its
	// keys, so a and c take its partitions at once rather than when its
	// leases run out.
	ms["b"].cancel()
	<-ms["b"].done
	delete(ms, "b")
	kv, err := Open(context.Background(), natstest.Bus(t, url), "test", 1, testTTL)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := kv.Get(context.Background(), memberKey+"b"); !errors.Is(err, bus.ErrNoKey) {
		t.Errorf("b's member key after it left: %+v, %v; want it deleted", v, err)
	}
	for p := range partitions {
		var o Owner
		if v, err := kv.Get(context.Background(), ownerKey+strconv.Itoa(p)); err == nil && json.Unmarshal(v.Data, &o) == nil && o.Instance == "b" {
			t.Errorf("partition %d still leased to b after it left: %s", p, v.Data)
		}
	}
	converged(t, tr, ms, partitions)

	// d joins: it takes partitions from a and c without anyone restarting.
	ms["d"] = startMember(t, url, tr, "d", partitions)
	converged(t, tr, ms, partitions)

	// c is cut off from NATS: it can no longer renew, so it must stop
	// answering for its partitions before a or d may start them (the
	// tracker checks that), and they take over within about the lease.
	ms["c"].b.Close()
	delete(ms, "c")
	start := time.Now()
	converged(t, tr, ms, partitions)
	t.Logf("takeover after losing a member: %v (lease %v)", time.Since(start), testTTL)
}

// A member whose writes to the bucket stall (its connection stops
// delivering, both ways, and does not close: a network partition, a
// bucket leader without quorum) stops every partition by the end of its
// validity, on its timers, while its loop waits for writes that do not
// come back; the others take them over only after that (the tracker
// checks both, at each start), and when it comes back it takes its share
// again.
func TestLeasesStalledMember(t *testing.T) {
	const partitions = 8
	url := natstest.Start(t).URL()
	tr := &tracker{t: t, active: map[int]run{}, byWho: map[string]*Loop{}}
	ms := map[string]*member{}
	for _, name := range []string{"a", "b"} {
		ms[name] = startMember(t, url, tr, name, partitions)
	}
	p := proxy.New(t, strings.TrimPrefix(url, "nats://"))
	ms["c"] = startMember(t, "nats://"+p.Addr(), tr, "c", partitions)
	converged(t, tr, ms, partitions)

	p.Stall()
	stalled := ms["c"]
	delete(ms, "c")
	converged(t, tr, ms, partitions)
	tr.mu.Lock()
	for q, r := range tr.active {
		if r.member == "c" {
			t.Errorf("partition %d still runs on c, stalled", q)
		}
	}
	tr.mu.Unlock()

	p.Resume()
	ms["c"] = stalled
	converged(t, tr, ms, partitions)
}

// A second live member with a name already taken is refused; a name whose
// holder died is free again once its lease has run out.
func TestDuplicateInstance(t *testing.T) {
	url := natstest.Start(t).URL()
	tr := &tracker{t: t, active: map[int]run{}, byWho: map[string]*Loop{}}
	startMember(t, url, tr, "a", 4)
	kv, err := Open(context.Background(), natstest.Bus(t, url), "test", 1, testTTL)
	if err != nil {
		t.Fatal(err)
	}
	twin := New(kv, Config{Self: Member{Instance: "a"}, Slots: 4, TTL: testTTL, Hand: &fakeHand{tr: tr, name: "a2"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := twin.Join(context.Background()); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("join of a live name: %v", err)
	}
	// A dead one: its key is there, but nobody renews it.
	value := []byte(`{"instance":"ghost"}`)
	if _, err := kv.Create(context.Background(), memberKey+"ghost", value); err != nil {
		t.Fatal(err)
	}
	ghost := New(kv, Config{Self: Member{Instance: "ghost"}, Slots: 4, TTL: testTTL, Hand: &fakeHand{tr: tr, name: "ghost"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := ghost.Join(context.Background()); err != nil {
		t.Fatalf("join of a dead name: %v", err)
	}
}
