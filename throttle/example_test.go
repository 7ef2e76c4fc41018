package throttle_test

import (
	"fmt"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/throttle"
)

// The token bucket of the background text: capacity 3, one token a second.
func ExampleTokenBucket() {
	b := throttle.NewTokenBucket(1, time.Second, 3)
	start := time.Unix(0, 0)
	for _, s := range []float64{0, 0, 0, 0, 1, 1.5, 3} {
		v := b.Hit(start.Add(time.Duration(s * float64(time.Second))))
		fmt.Print(v.Allowed, " ")
	}
	fmt.Println()
	// Output: true true true false true false true
}

func ExampleSet() {
	s, _ := throttle.NewSet(throttle.DefaultPolicies())
	t := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC).UnixMilli()
	for i := range 11 {
		for _, a := range s.Observe(chat.Event{TS: t + int64(i)*100, Room: "lobby", User: "alice", Text: fmt.Sprint("message ", i)}) {
			fmt.Printf("alert: %s %s/%s count %d limit %d\n", a.Policy, a.Room, a.User, a.Count, a.Limit)
		}
	}
	r := s.Check(t+2000, "lobby", "alice", "", false)
	d := r.Decisions[0]
	fmt.Println(r.Allowed, d.Policy, d.Count, d.Limit, d.RetryAfterMs)
	// Output:
	// alert: user_room_flood lobby/alice count 11 limit 10
	// false user_room_flood 11 10 8000
}
