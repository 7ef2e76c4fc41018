package main

import (
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

// The dashboard shows a spike's alert and its active room with the
// count, the ratio to the baseline's rate beside it, and why in the title
// (docs/contract.md section 15).
func TestBrowserSpike(t *testing.T) {
	tm, b, clock := openDashboardWith(t, `policies:
  - {name: surge, scope: room, algorithm: spike, window: 1m, baseline: 1h, factor: 2, min_messages: 3, min_users: 2}
`)

	// 59 messages half an hour ago, of one user: a rate of one a minute,
	// and never a spike (one user). Then three users in the last minute:
	// three times that rate, twice is a spike.
	now := clock.ms.Load()
	var evs []chat.Event
	for range 59 {
		evs = append(evs, chat.Event{Room: "lobby", User: "regular", TS: now - 30*60_000})
	}
	for _, u := range []string{"alice", "bob", "carol"} {
		evs = append(evs, chat.Event{Room: "lobby", User: u, TS: now})
	}
	for i, e := range evs {
		tm.publish("chat.lobby."+e.User, eventJSON(e, i))
	}
	tm.waitReceived(len(evs))

	alert := `#alerts li[data-testid="alert"][data-policy="surge"][data-room="lobby"] .count`
	b.waitText(alert, "3/3 \u00d73")
	for _, want := range []string{"a spike: 3 messages from 3 users", "3 times the 1 the baseline's rate expects (59 messages)", "over from 3"} {
		b.titleSays(alert, want)
	}
	b.waitText(`#active tr[data-policy="surge"][data-room="lobby"] td[data-col="count"]`, "3/3 \u00d73")
}
