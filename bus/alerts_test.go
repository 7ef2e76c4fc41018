package bus

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/throttle"
)

// Alerts are written by hand; they must be what json.Marshal and the
// fmt-built id were: the bytes that subscribers and JetStream's
// deduplication have always seen.
func TestAlertEncoding(t *testing.T) {
	until := chat.Time(1764000060123)
	for _, a := range []throttle.Alert{
		{Policy: "user_flood", Room: "lobby", User: "alice", Count: 31, Limit: 30, At: 1764000000123},
		{Policy: "p", Room: `a "quoted" \\ room`, User: "<b>&amp;</b>", Count: 0, Limit: -1, At: 0},
		{Policy: "p", Room: "caf\u00e9 \u2028 \U0001F600", User: "bad\xffutf8\x7f", Count: 1 << 62, Limit: 1, At: 253402300799999},
		{Policy: "p", Room: "r", User: "u", Count: 2, Limit: 1, At: 1764000000123, Until: &until, Event: "$ev<1>:example.org"},
		{Policy: "surge", Room: "lobby", Count: 50, Limit: 50, At: 1764000000123, Event: "m-1", Spike: &throttle.Spike{Users: 3, BaselineMessages: 590, Expected: 10, Ratio: 5}},
		{Policy: "surge", Room: "lobby", Count: 20, Limit: 20, At: 1764000000123, Spike: &throttle.Spike{Users: 7}},
		{Policy: "mentions", Room: "lobby", User: "spammer", Count: 14, Limit: 10, At: 1764000000123, Event: "m-2", Cost: 12},
		{},
	} {
		checkAlertEncoding(t, a)
	}
}

func FuzzAlertEncoding(f *testing.F) {
	f.Add("user_flood", "lobby", "alice", int64(31), int64(30), int64(1764000000123))
	f.Add("p", "<&>\"\\", "\x00\xff\u2029", int64(-5), int64(0), int64(-1))
	f.Fuzz(func(t *testing.T, policy, room, user string, count, limit, at int64) {
		a := throttle.Alert{Policy: policy, Room: room, User: user, Count: count, Limit: limit, At: chat.Time(at)}
		checkAlertEncoding(t, a)
		until := chat.Time(at + count)
		a.Until, a.Event, a.Cost = &until, room+user, limit
		checkAlertEncoding(t, a)
		a.Spike = &throttle.Spike{Users: count, BaselineMessages: limit, Expected: float64(at) / 1000, Ratio: float64(count) / 3}
		checkAlertEncoding(t, a)
	})
}

func checkAlertEncoding(t *testing.T, a throttle.Alert) {
	t.Helper()
	want, err := json.Marshal(a)
	if err != nil {
		t.Skip("json.Marshal refuses it:", err) // a time out of RFC 3339's range
	}
	if got := appendAlert(nil, a); string(got) != string(want) {
		t.Errorf("appendAlert(%#v)\n got %s\nwant %s", a, got, want)
	}
	if got, want := alertID(a), fmt.Sprintf("%s|%q|%q|%d", a.Policy, a.Room, a.User, int64(a.At)); got != want {
		t.Errorf("alertID(%#v) = %s, want %s", a, got, want)
	}
}

// BenchmarkAlert is the cost of publishing one alert on core NATS, the
// connection's flusher aside.
func BenchmarkAlert(b *testing.B) {
	bus := openBench(b, false)
	a := throttle.Alert{Policy: "user_flood", Room: "room-0042", User: "user-012345", Count: 31, Limit: 30, At: 1764000000123}
	b.ReportAllocs()
	for b.Loop() {
		bus.Alert(a)
	}
}

// In a group, alerts go through the group's alert stream: an alert raised
// twice (by two members, or by one and then its partition's next holder)
// reaches AlertSubject's subscribers once, and another crossing does too.
func TestGroupAlertsOncePerCrossing(t *testing.T) {
	b := openTest(t, true)
	if err := b.GroupAlerts(t.Context(), "g", 1); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []throttle.Alert
	sub, err := b.SubscribeAlerts(func(a throttle.Alert) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, a)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	a := throttle.Alert{Policy: "user_flood", Room: "lobby", User: "alice", Count: 31, Limit: 30, At: 1764000000123}
	later := a
	later.At++
	b.Alert(a)
	b.Alert(a)
	b.Alert(later)
	b.Alert(a)
	want := []throttle.Alert{a, later}
	wait.For(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < len(want) {
			return fmt.Errorf("%d alerts heard, want %d", len(got), len(want))
		}
		return nil
	})
	// Every publish has been acked (a duplicate too): the stream has
	// republished all it will.
	wait.For(t, 10*time.Second, func() error {
		if n := b.alerts.Load().js.PublishAsyncPending(); n > 0 {
			return fmt.Errorf("%d alerts not acked yet", n)
		}
		return nil
	})
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("heard %v, want %v", got, want)
	}
	if n := b.AlertFailed(); n != 0 {
		t.Errorf("%d alerts not kept", n)
	}
}
