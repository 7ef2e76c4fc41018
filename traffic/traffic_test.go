package traffic

import (
	"context"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
)

// Good events decode as the contract says, with the room and user the
// generator reports; bad ones are rejected.
func TestEventsDecode(t *testing.T) {
	g := New(Config{Rooms: 20, Users: 200, BadRatio: 0.2, Seed: 3, Flood: true, Friendly: true})
	now := time.Now()
	good, bad := 0, 0
	for i := range 5000 {
		at := now.Add(time.Duration(i) * 10 * time.Millisecond)
		subject, data, room, user, ok := g.Next(at)
		ev, err := ingest.Decode(data, at.UnixMilli(), 5000)
		if !ok {
			bad++
			if err == nil {
				t.Fatalf("bad event accepted: %s", data)
			}
			continue
		}
		good++
		if err != nil || ev.Room != room || ev.User != user || !ev.Counted || subject != "chat."+room+"."+user {
			t.Fatalf("%s %s: %+v %v", subject, data, ev, err)
		}
		if len(data) < 90 || len(data) > 220 {
			t.Fatalf("event of %d bytes: %s", len(data), data)
		}
	}
	if good == 0 || bad < 500 || bad > 1500 {
		t.Fatalf("%d good, %d bad", good, bad)
	}
}

// Run sends what the rate asks for, wave or not, and counts it.
func TestRunCounts(t *testing.T) {
	for _, wave := range []bool{false, true} {
		clock := time.Unix(1_800_000_000, 0)
		g := New(Config{Rooms: 5, Users: 50, Rate: 1000, Duration: 30 * time.Second, Wave: wave, Seed: 1,
			Now: func() time.Time { clock = clock.Add(100 * time.Millisecond); return clock }})
		sent := 0
		c, err := g.Run(context.Background(), func(string, []byte) error { sent++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		want := int(g.sent(30))
		if c.Sent != sent || c.Sent != want || c.Good != c.Sent {
			t.Fatalf("wave %v: counted %+v, published %d, want %d", wave, c.Sent, sent, want)
		}
		total := 0
		for _, n := range c.Rooms {
			total += n
		}
		if total != c.Good {
			t.Fatalf("rooms add up to %d of %d", total, c.Good)
		}
	}
}

// With JoinEvery n, one event in n+1 is a join that decodes as one, of
// the room and user reported, and Run counts the joins apart from the
// rooms' and users' messages.
func TestJoinEvery(t *testing.T) {
	g := New(Config{Rooms: 20, Users: 200, Seed: 3, JoinEvery: 20})
	now := time.Now()
	joins := 0
	for i := range 2100 {
		_, data, room, user, ok := g.Next(now)
		ev, err := ingest.Decode(data, now.UnixMilli(), 5000)
		if !ok || err != nil || ev.Room != room || ev.User != user || !ev.Counted {
			t.Fatalf("event %d: %s: %+v %v", i, data, ev, err)
		}
		if ev.Kind == chat.KindJoin {
			joins++
			if (i+1)%21 != 0 {
				t.Fatalf("event %d is a join: %s", i, data)
			}
		}
	}
	if joins != 100 {
		t.Fatalf("%d joins in 2100 events, want 100", joins)
	}
	clock := time.Unix(1_800_000_000, 0)
	g = New(Config{Rooms: 5, Users: 50, Rate: 1000, Duration: 21 * time.Second, Seed: 1, JoinEvery: 20,
		Now: func() time.Time { clock = clock.Add(100 * time.Millisecond); return clock }})
	c, err := g.Run(context.Background(), func(string, []byte) error { return nil })
	messages := 0
	for _, n := range c.Rooms {
		messages += n
	}
	if err != nil || c.Joins != c.Sent/21 || c.Good != c.Sent || messages != c.Sent-c.Joins {
		t.Fatalf("%+v (%v): want a join in 21, the rest messages", c, err)
	}
}
