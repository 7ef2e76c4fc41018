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
	chromium := chromiumPath(t)
	clock := newFrozen()
	tm := startMainAt(t, clock.Now, "--policies", policiesFile(t, `policies:
  - {name: pings, scope: user, algorithm: sliding_window, limit: 3, window: 1m, cost: {mentions: 1}}
`))
	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)

	// One mention, then a message that mentions four (one twice): 1 + 4
	// of a limit of 3, the second crossing.
	ts := time.UnixMilli(clock.ms.Load()).UTC().Format(time.RFC3339Nano)
	tm.publish("chat.lobby.spammer", fmt.Sprintf(`{"id":"c-1","room":"lobby","user":"spammer","ts":%q,"text":"hi","mentions":["a"]}`, ts))
	tm.publish("chat.lobby.spammer", fmt.Sprintf(`{"id":"c-2","room":"lobby","user":"spammer","ts":%q,"text":"hi all","mentions":["a","b","c","d","a"]}`, ts))
	tm.waitReceived(2)

	alert := `#alerts li[data-testid="alert"][data-policy="pings"][data-user="spammer"] .count`
	b.waitText(alert, "5/3 +4")
	title := evaluate[string](b, fmt.Sprintf(`document.querySelector(%s).title`, jsString(alert)))
	if want := "the message that crossed cost 4"; !strings.Contains(title, want) {
		t.Errorf("the alert's title %q does not say %q", title, want)
	}
}
