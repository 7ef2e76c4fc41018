package moderation

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

func tp(ms int64) *chat.Time { t := chat.Time(ms); return &t }

// What Parse reads back is what was kept, and only that: an action of
// another key, an unknown field, a bad name or interval, trailing data are
// refused with the field named.
func TestParse(t *testing.T) {
	a := Action{Kind: Slowmode, Room: "lobby.1 ünïcode/%", Interval: 30_000, Until: tp(1_000), Actor: "mod", Set: 5, ExemptRoles: []string{"moderator"}}
	data, _ := json.Marshal(a)
	got, err := Parse(a.Key(), data)
	if err != nil || got.Key() != a.Key() || got.Interval != a.Interval || *got.Until != *a.Until {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, c := range []struct{ key, data, want string }{
		{a.Key(), `{"kind":"slowmode","room":"lobby","interval_ms":1,"until":null,"set":"2026-01-01T00:00:00Z"}`, "holds the action of"},
		{KeyOf(Slowmode, "r", ""), `{"kind":"slowmode","room":"r","interval_ms":0,"until":null,"set":"2026-01-01T00:00:00Z"}`, "interval: must be"},
		{KeyOf(Timeout, "", "u"), `{"kind":"timeout","user":"u","colour":1,"until":null,"set":"2026-01-01T00:00:00Z"}`, "unknown field"},
		{KeyOf(Timeout, "", "u"), `{"kind":"timeout","user":"u","until":null,"set":"2026-01-01T00:00:00Z"} {}`, "data after"},
		{KeyOf(Timeout, "", ""), `{"kind":"timeout","user":"","until":null,"set":"2026-01-01T00:00:00Z"}`, "user: must be"},
		{"ban.x", `{"kind":"ban","user":"u","until":null,"set":"2026-01-01T00:00:00Z"}`, "not an action"},
		{KeyOf(Timeout, "", "u"), `{"kind":"timeout","user":"u","until":null,"set":"2026-01-01T00:00:00Z","exempt_roles":["a b"]}`, "exempt_roles[0]"},
		{KeyOf(Timeout, "", "u"), `[]`, "cannot unmarshal"},
	} {
		if _, err := Parse(c.key, []byte(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want an error with %q", c.key, c.data, err, c.want)
		}
	}
}

// The book answers as of the instant asked: an action ends at its until
// with nothing ticking; of a user's two timeouts, the later end is told.
func TestBook(t *testing.T) {
	b := NewBook()
	if !b.Empty() || b.Slowmode("r", 0) != nil || b.Timeout("r", "u", 0) != nil {
		t.Fatal("a new book holds something")
	}
	b.Put(Action{Kind: Slowmode, Room: "r", Interval: 10, Until: tp(100)}, 0)
	b.Put(Action{Kind: Timeout, User: "u", Until: tp(50)}, 0)
	b.Put(Action{Kind: Timeout, User: "u", Room: "r", Until: tp(80)}, 0)
	if a := b.Slowmode("r", 99); a == nil || b.Slowmode("r", 100) != nil {
		t.Fatalf("slow mode at 99 and 100: %v, %v", a, b.Slowmode("r", 100))
	}
	if a := b.Timeout("r", "u", 10); a == nil || a.Room != "r" {
		t.Fatalf("two timeouts: %+v, want the one that ends later", a)
	}
	if a := b.Timeout("elsewhere", "u", 60); a != nil {
		t.Fatalf("at 60 elsewhere: %+v", a)
	}
	in, out := b.List(60)
	if len(in) != 2 || len(out) != 1 {
		t.Fatalf("at 60: %d in force, %d expired", len(in), len(out))
	}
	b.Delete(KeyOf(Slowmode, "r", ""), 0)
	if b.Slowmode("r", 0) != nil {
		t.Fatal("deleted, still there")
	}
}

func TestExempts(t *testing.T) {
	if !Exempts([]string{"bot-*"}, nil, "bot-1", nil) || Exempts([]string{"bot-*"}, nil, "robot", nil) {
		t.Error("user globs")
	}
	if !Exempts(nil, []string{"moderator"}, "u", []string{"vip", "moderator"}) || Exempts(nil, []string{"moderator"}, "u", []string{"vip"}) {
		t.Error("roles")
	}
}

// FuzzParse: whatever Parse accepts validates, is kept under its own key,
// and marshals back to something Parse accepts as the same.
func FuzzParse(f *testing.F) {
	a := Action{Kind: Timeout, User: "u", Room: "r", Until: tp(9), Reason: "spam"}
	data, _ := json.Marshal(a)
	f.Add(a.Key(), data)
	f.Add(KeyOf(Slowmode, "r", ""), []byte(`{"kind":"slowmode","room":"r","interval_ms":5,"until":null,"set":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		a, err := Parse(key, data)
		if err != nil {
			return
		}
		if err := a.Validate(); err != nil || a.Key() != key {
			t.Fatalf("accepted %+v under %s: %v", a, key, err)
		}
		again, _ := json.Marshal(a)
		if b, err := Parse(key, again); err != nil || b.Key() != a.Key() {
			t.Fatalf("re-marshalled %s: %v", again, err)
		}
	})
}

// Await returns once the book holds a revision, woken by the change that
// brings it; short of it, it waits until its context is done.
func TestBookAwait(t *testing.T) {
	b := NewBook()
	a := Action{Kind: Slowmode, Room: "r", Interval: 1000}
	got := make(chan bool)
	go func() { got <- b.Await(context.Background(), 3) }()
	b.Put(a, 2)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Await(done, 3) {
		t.Error("Await said true at revision 2, for 3")
	}
	b.Delete(a.Key(), 3)
	if !<-got {
		t.Error("Await said false once the book held revision 3")
	}
	if !b.Await(done, 3) {
		t.Error("Await said false for a revision the book holds")
	}
}

// BenchmarkBook is a moderator's write (a timeout set again), a check's
// read and an expiry (a delete, then the timeout set again) with n
// timeouts in force: each costs the same whatever n.
//
//	go test -run XXX -bench Book ./moderation/
func BenchmarkBook(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		book := NewBook()
		timeouts := make([]Action, n)
		for i := range timeouts {
			until := chat.Time(int64(2_000_000_000_000 + i))
			timeouts[i] = Action{Kind: Timeout, User: fmt.Sprint("user-", i), Until: &until}
		}
		book.PutAll(timeouts, 1)
		b.Run(fmt.Sprintf("set/%d", n), func(b *testing.B) {
			for i := range b.N {
				book.Put(timeouts[i%n], uint64(i))
			}
		})
		b.Run(fmt.Sprintf("check/%d", n), func(b *testing.B) {
			for i := range b.N {
				if book.Timeout("lobby", timeouts[i%n].User, 1) == nil {
					b.Fatal("a timeout not found")
				}
			}
		})
		b.Run(fmt.Sprintf("expire/%d", n), func(b *testing.B) {
			for i := range b.N {
				a := timeouts[i%n]
				book.Delete(a.Key(), uint64(i))
				book.Put(a, uint64(i))
			}
		})
	}
}
