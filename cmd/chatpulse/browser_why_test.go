package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The dashboard shows the alert of a policy with a cost with what the
// message that crossed cost beside the count, and why in the title
// (docs/contract.md section 15).
func TestBrowserCost(t *testing.T) {
	tm, b, clock := openDashboardWith(t, `policies:
  - {name: pings, scope: user, algorithm: sliding_window, limit: 3, window: 1m, cost: {mentions: 1}}
`)

	// One mention, then a message that mentions four (one twice): 1 + 4
	// of a limit of 3, the second crossing.
	ts := time.UnixMilli(clock.ms.Load()).UTC().Format(time.RFC3339Nano)
	tm.publish("chat.lobby.spammer", fmt.Sprintf(`{"id":"c-1","room":"lobby","user":"spammer","ts":%q,"text":"hi","mentions":["a"]}`, ts))
	tm.publish("chat.lobby.spammer", fmt.Sprintf(`{"id":"c-2","room":"lobby","user":"spammer","ts":%q,"text":"hi all","mentions":["a","b","c","d","a"]}`, ts))
	tm.waitReceived(2)

	alert := `#alerts li[data-testid="alert"][data-policy="pings"][data-user="spammer"] .count`
	b.waitText(alert, "5/3 +4")
	b.titleSays(alert, "the message that crossed cost 4")
}

// The dashboard shows a similar policy's alert as the accounts that
// posted alike texts, and says so in the title: it reads the policy's
// algorithm from GET /api/v1/throttle/policies.
func TestBrowserSimilar(t *testing.T) {
	tm, b, clock := openDashboardWith(t, `policies:
  - {name: copypaste, scope: room, algorithm: similar, limit: 3, window: 1m, similarity: 0.8}
`)

	ts := time.UnixMilli(clock.ms.Load()).UTC().Format(time.RFC3339Nano)
	for i := range 4 { // the fourth account crosses
		tm.publish(fmt.Sprint("chat.lobby.bot", i), fmt.Sprintf(`{"id":"s-%d","room":"lobby","user":"bot%d","ts":%q,"text":"Buy cheap gold now at example.com, best prices in town!"}`, i, i, ts))
	}
	tm.waitReceived(4)

	alert := `#alerts li[data-testid="alert"][data-policy="copypaste"][data-room="lobby"] .count`
	b.waitText(alert, "4/3 alike")
	b.titleSays(alert, "4 accounts posted texts alike (sharing 0.8 of their word pairs) within 1m")
	b.waitText(`#active tr[data-policy="copypaste"][data-room="lobby"] td[data-col="count"]`, "4/3 alike")
}

// openDashboardWith starts chatpulse with policies on a frozen clock, and
// a browser on its dashboard, connected.
func openDashboardWith(t *testing.T, policies string) (*testMain, *browser, *frozen) {
	t.Helper()
	chromium := chromiumPath(t)
	clock := newFrozen()
	tm := startMainAt(t, clock.Now, "--policies", policiesFile(t, policies))
	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	return tm, b, clock
}

// titleSays fails the test unless the title of what selector finds holds
// want.
func (b *browser) titleSays(selector, want string) {
	b.t.Helper()
	if title := evaluate[string](b, fmt.Sprintf(`document.querySelector(%s).title`, jsString(selector))); !strings.Contains(title, want) {
		b.t.Errorf("the title %q of %s does not say %q", title, selector, want)
	}
}
