package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The names of the moderation tests: markup, quotes, an ampersand, and
// what a URL path or a Matrix id holds ("/", "#", "?", "%", "!", "@",
// ":", ".").
const (
	modRoom = `<img src=x onerror="window.__xss=1"> !ops:m.org/#?&%`
	modUser = `@o'brien&"co"<b>:m.org`
)

// TestBrowserModeration acts from the dashboard in headless Chromium, as a
// moderator would, on a room and a user whose names need escaping
// everywhere: it sets a slow mode on the room in view by clicking, sees it
// in force (in the panel, beside the room's title, with its end in local
// time and a countdown), and the next check of a user who just posted
// there is denied by it; it times out a user picked from the room's top
// talkers, and the next check of theirs is denied by the timeout; a bad
// interval gets the API's 400 next to the form and changes nothing; the
// overview lists both actions, and lifting them there and in the room by
// clicking makes the next checks allowed. Every action names the actor
// typed in the panel.
func TestBrowserModeration(t *testing.T) {
	chromium := chromiumPath(t)
	tm := startMain(t)
	artifacts := artifactsDir(t)
	publishN(tm, modRoom, "alice", 3)
	publishN(tm, modRoom, modUser, 2)
	tm.waitReceived(5)

	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	b.wait("the empty list of actions", `!document.querySelector('#actions-empty').hidden`)
	b.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/rooms/' + encodeURIComponent(%s)`, jsString(modRoom))))
	b.wait("the room", fmt.Sprintf(`document.querySelector('#room-title').textContent === %s && !document.querySelector('#room-detail').hidden`, jsString(modRoom)))
	b.wait("the user in the top talkers", topTalker(modUser, "messages")+`?.textContent === '2'`)
	b.waitText("#slowmode-state", "Off: users post as the policies let them.")
	b.typeInto("#act-actor", "mod-ann")

	// Slow mode, set by clicking.
	b.typeInto("#slowmode-interval", "10m")
	b.typeInto("#slowmode-for", "1h")
	b.click("#slowmode-set")
	slow := modRow("act-actions", "slowmode", modRoom, "")
	b.wait("the slow mode in force here", slow+` !== undefined`)
	b.wait("the room marked", `!document.querySelector('#room-slowmode').hidden && document.querySelector('#room-slowmode').textContent.startsWith('slow mode · 1 per 10m · ')`)
	b.wait("the slow mode in the form", `document.querySelector('#slowmode-state').textContent.startsWith('On: one message per user per 10m, until ') && !document.querySelector('#slowmode-lift').disabled`)
	acts := tm.actions()
	if len(acts) != 1 || acts[0].Kind != "slowmode" || acts[0].Room != modRoom || acts[0].Interval != 600_000 || acts[0].Until == nil || acts[0].Actor != "mod-ann" {
		t.Fatalf("after setting slow mode: %+v", acts)
	}
	// Its end, in local time (the page's own clock format) and counting down.
	if got := evaluate[string](b, slow+`.querySelector('td[data-col="ends"] time').dateTime`); got != *acts[0].Until {
		t.Errorf("until shown as %q, the API says %q", got, *acts[0].Until)
	}
	left := evaluate[string](b, slow+`.querySelector('td[data-col="ends"] .left').textContent`)
	if !strings.HasPrefix(left, "59m ") && !strings.HasPrefix(left, "1h ") {
		t.Errorf("time left %q, want about an hour", left)
	}
	b.wait("the countdown to move", fmt.Sprintf(`%s.querySelector('td[data-col="ends"] .left').textContent !== %s`, slow, jsString(left)))

	publishN(tm, modRoom, "bob", 1)
	tm.waitReceived(6)
	if ok, policy, retry, _ := tm.firstDecision(modRoom, "bob", ""); ok || policy != "slowmode" || retry <= 0 {
		t.Fatalf("bob just posted in slow mode: allowed %v, %s, retry %d; want denied by slowmode", ok, policy, retry)
	}

	// A timeout of a user picked from the top talkers.
	b.do(chromedp.Click(chromedp.JSPath(topTalker(modUser, "user"))))
	b.wait("the user picked", fmt.Sprintf(`document.querySelector('#timeout-user').value === %s`, jsString(modUser)))
	b.typeInto("#timeout-for", "30m")
	b.typeInto("#timeout-reason", `spam & "flood"`)
	b.click("#timeout-set")
	timeout := modRow("act-actions", "timeout", modRoom, modUser)
	b.wait("the timeout in force here", timeout+` !== undefined`)
	b.wait("the timeout in the form", fmt.Sprintf(`document.querySelector('#timeout-state').textContent.startsWith(%s) && !document.querySelector('#timeout-lift').disabled`, jsString(modUser+" is timed out here until ")))
	if ok, policy, retry, _ := tm.firstDecision(modRoom, modUser, ""); ok || policy != "timeout" || retry <= 29*60_000 {
		t.Fatalf("timed out: allowed %v, %s, retry %d; want denied by timeout", ok, policy, retry)
	}
	if ok, _, _, _ := tm.firstDecision("elsewhere", modUser, ""); !ok {
		t.Errorf("a timeout in one room denies %s in another", modUser)
	}
	var timedOut actionAnswer
	for _, a := range tm.actions() {
		if a.Kind == "timeout" {
			timedOut = a
		}
	}
	if timedOut.User != modUser || timedOut.Room != modRoom || timedOut.Actor != "mod-ann" {
		t.Fatalf("the timeout in the API: %+v", timedOut)
	}
	text := evaluate[string](b, timeout+`.querySelector('td[data-col="what"]').textContent`)
	if want := modUser + " timed out in " + modRoom + "by mod-ann · spam & \"flood\""; text != want {
		t.Errorf("the timeout reads %q, want %q", text, want)
	}
	if got := evaluate[bool](b, `window.__xss === undefined && document.querySelectorAll('main img, main b').length === 0`); !got {
		t.Error("a name was parsed as HTML")
	}
	b.do(chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); window.scrollTo(0, 0)`))
	b.screenshot(artifacts, "moderation-room.png")

	// A bad interval: the API's error beside the form, and nothing changed.
	b.expectNetworkErrors(true) // the browser logs the 400
	b.typeInto("#slowmode-interval", "0s")
	b.click("#slowmode-set")
	b.waitText("#slowmode-error", `400: interval: "0s" is not a positive duration of a millisecond at least (examples: 30s, 2m)`)
	if acts := tm.actions(); len(acts) != 2 || slowInterval(acts) != 600_000 {
		t.Fatalf("after a bad interval: %+v", acts)
	}

	// The overview lists both; the timeout is lifted there.
	b.click("#back")
	b.wait("the dashboard", `!document.querySelector('#dashboard').hidden`)
	b.wait("both actions on the overview", modRow("actions", "slowmode", modRoom, "")+` !== undefined && `+modRow("actions", "timeout", modRoom, modUser)+` !== undefined`)
	b.expectNetworkErrors(false) // the browser logged the 400 before the page showed its error
	b.wait("the overview's over-the-limit list without them", `!document.querySelector('#active-empty').hidden`)
	b.screenshot(artifacts, "moderation-overview.png")
	b.do(chromedp.Click(chromedp.JSPath(modRow("actions", "timeout", modRoom, modUser) + `.querySelector('button.lift')`)))
	b.wait("the timeout gone from the overview", modRow("actions", "timeout", modRoom, modUser)+` === undefined`)
	if ok, _, _, _ := tm.firstDecision(modRoom, modUser, ""); !ok {
		t.Fatal("the timeout lifted, still denied")
	}

	// Back in the room, the slow mode is lifted from its form.
	b.do(chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('#actions tbody tr')].find(tr => tr.dataset.kind === 'slowmode').querySelector('a.room')`)))
	b.wait("the room again", fmt.Sprintf(`document.querySelector('#room-title').textContent === %s`, jsString(modRoom)))
	b.wait("the slow mode lift", `!document.querySelector('#slowmode-lift').disabled`)
	b.click("#slowmode-lift")
	b.wait("the slow mode gone", slow+` === undefined && document.querySelector('#room-slowmode').hidden && document.querySelector('#act').dataset.slowmode === 'false'`)
	b.waitText("#slowmode-state", "Off: users post as the policies let them.")
	if ok, _, _, _ := tm.firstDecision(modRoom, "bob", ""); !ok {
		t.Fatal("the slow mode lifted, bob still denied")
	}
	if acts := tm.actions(); len(acts) != 0 {
		t.Fatalf("after lifting both: %+v", acts)
	}
	b.wait("nothing in force here", `document.querySelector('#act-actions').hidden && !document.querySelector('#act-actions-empty').hidden`)

	// A phone: the panel fits without horizontal scrolling.
	b.viewport(390, 844, true)
	b.wait("a phone-wide panel", `document.documentElement.scrollWidth <= window.innerWidth`)
	b.screenshot(artifacts, "phone-moderation.png")
	b.checkClean()
}

// TestBrowserModerationToken acts from the dashboard of a chatpulse that
// needs a token: acting (a slow mode with the form's defaults, a timeout
// everywhere) carries the token the page was given for reading;
// a request without it is refused (401), and when the prompt it brings up
// is dismissed the panel says that the action was not done and why; given
// the token, the same click acts.
func TestBrowserModerationToken(t *testing.T) {
	chromium := chromiumPath(t)
	const token = "mod-t0ken"
	tm := startMain(t, "--auth-token", token)
	publishN(tm, "lobby", "alice", 3)
	publishN(tm, "lobby", "troll", 5)
	tm.waitReceived(8)
	req, _ := http.NewRequest(http.MethodPut, tm.url+"/api/v1/users/troll/timeout", strings.NewReader(`{"for":"1h"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("PUT without the token: %d, want 401", resp.StatusCode)
	}

	b := openBrowser(t, chromium, tm.url)
	b.expectNetworkErrors(true) // the 401s before the token is given
	b.navigate(tm.url + "/#/rooms/lobby")
	const prompt = `dialog.token-prompt`
	b.wait("the token prompt", fmt.Sprintf(`document.querySelector(%q)?.open === true`, prompt))
	b.do(chromedp.SendKeys(prompt+" input", token+kb.Enter))
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	b.waitText("#room-title", "lobby")
	b.wait("the list of actions, read with the token", `!document.querySelector('#act-actions-empty').hidden && document.querySelector('#act-actions-note').textContent === ''`)

	// Acting with the token the page holds: the slow mode as the form
	// offers it, and a timeout everywhere of a top talker.
	b.typeInto("#act-actor", "mod-bob")
	b.click("#slowmode-set")
	b.wait("the slow mode in force", modRow("act-actions", "slowmode", "lobby", "")+` !== undefined && !document.querySelector('#room-slowmode').hidden`)
	b.do(chromedp.Click(chromedp.JSPath(topTalker("troll", "user"))))
	b.wait("troll picked", `document.querySelector('#timeout-user').value === 'troll'`)
	b.click("#timeout-everywhere")
	b.typeInto("#timeout-reason", "spam")
	b.click("#timeout-set")
	everywhere := modRow("act-actions", "timeout", "", "troll")
	b.wait("the timeout in force", everywhere+` !== undefined`)
	if evaluate[bool](b, fmt.Sprintf(`document.querySelector(%q) !== null`, prompt)) {
		t.Fatal("acting asked for the token again")
	}
	if ok, policy, _, _ := tm.firstDecision("anywhere", "troll", ""); ok || policy != "timeout" {
		t.Fatalf("timed out everywhere: allowed %v, %s", ok, policy)
	}
	if acts := tm.actions(); len(acts) != 2 || acts[0].Actor != "mod-bob" || acts[1].Actor != "mod-bob" || slowInterval(acts) != 30_000 {
		t.Fatalf("the actions in the API: %+v", acts)
	}
	b.do(chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); window.scrollTo(0, 0)`))
	b.screenshot(artifactsDir(t), "moderation-lobby.png")

	// Without the token: refused, and the panel says so.
	b.do(chromedp.Evaluate[chromedp.Void](`sessionStorage.removeItem('chatpulse.token')`))
	b.click("#timeout-lift")
	b.wait("the token prompt on acting", fmt.Sprintf(`document.querySelector(%q)?.open === true`, prompt))
	b.do(chromedp.SendKeys(prompt+" input", kb.Escape))
	b.waitText("#timeout-error", "Not done: this chatpulse needs its token (401), and none was given.")
	if ok, _, _, _ := tm.firstDecision("anywhere", "troll", ""); ok {
		t.Fatal("a lift without the token lifted the timeout")
	}

	// With it: the same click lifts.
	b.click("#timeout-lift")
	b.wait("the token prompt again", fmt.Sprintf(`document.querySelector(%q)?.open === true`, prompt))
	b.do(chromedp.SendKeys(prompt+" input", token+kb.Enter))
	b.wait("the timeout lifted", everywhere+` === undefined && document.querySelector('#timeout-error').hidden`)
	if ok, _, _, _ := tm.firstDecision("anywhere", "troll", ""); !ok {
		t.Fatal("lifted with the token, still denied")
	}
	b.wait("the list read again with the token", `document.querySelector('#act-actions-note').textContent === ''`)
	b.checkClean()
}

// slowInterval is the interval of the slow mode among acts, or 0.
func slowInterval(acts []actionAnswer) int64 {
	for _, a := range acts {
		if a.Kind == "slowmode" {
			return a.Interval
		}
	}
	return 0
}

// modRow is a JavaScript expression for the row of an action in the list
// with id table, or undefined.
func modRow(table, kind, room, user string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#%s tbody tr')].find(tr => tr.dataset.kind === %s && tr.dataset.room === %s && tr.dataset.user === %s)`,
		table, jsString(kind), jsString(room), jsString(user))
}

// topTalker is a JavaScript expression for the cell col of user's row in
// the room's top talkers, or null.
func topTalker(user, col string) string {
	return fmt.Sprintf(`document.querySelector(%s)`, jsString(fmt.Sprintf(`#room-top-users tbody tr[data-user=%s] td[data-col=%q]`, cssString(user), col)))
}

// typeInto empties the input sel and types text into it.
func (b *browser) typeInto(sel, text string) {
	b.t.Helper()
	b.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%s).value = ''`, jsString(sel))),
		chromedp.SendKeys(chromedp.CSS(sel), text))
}

// cssString quotes s as a CSS string, for an attribute selector.
func cssString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\a `).Replace(s) + `"`
}
