package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chatpulse/chatpulse/chat"
)

// The dashboard shows a spike's alert and its active room with the
// count, the ratio to the baseline's rate beside it, and why in the title
// (docs/contract.md section 15).
func TestBrowserSpike(t *testing.T) {
	chromium := chromiumPath(t)
	clock := newFrozen()
	tm := startMainAt(t, clock.Now, "--policies", policiesFile(t, `policies:
  - {name: surge, scope: room, algorithm: spike, window: 1m, baseline: 1h, factor: 2, min_messages: 3, min_users: 2}
`))
	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)

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
	title := evaluate[string](b, fmt.Sprintf(`document.querySelector(%s).title`, jsString(alert)))
	for _, want := range []string{"a spike: 3 messages from 3 users", "3 times the 1 the baseline's rate expects (59 messages)", "over from 3"} {
		if !strings.Contains(title, want) {
			t.Errorf("the alert's title %q does not say %q", title, want)
		}
	}
	b.waitText(`#active tr[data-policy="surge"][data-room="lobby"] td[data-col="count"]`, "3/3 \u00d73")
}
