package main

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// The standalone dashboard has no group panel, and never asks for the
// group (a 404 would be logged by the browser as an error).
func TestBrowserGroupPanelStandalone(t *testing.T) {
	chromium := chromiumPath(t)
	tm := startMain(t, "--push-interval", "100ms")
	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	publishN(tm, "lobby", "alice", 3)
	b.waitText("#messages", "3")
	// Views have come and the page has drawn them: had it taken this for a
	// group member, it would have asked for the group while it handled the
	// first of them. The browser reports a page's requests in the order
	// the page makes them, so once it has reported one that the page makes
	// now, it has reported any request for the group.
	const marker = "readyz?after-the-views"
	b.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`fetch(%s).then(() => {})`, jsString(marker)), chromedp.EvalAwaitPromise))
	wait.For(t, deliveryWait, func() error {
		if !slices.ContainsFunc(b.requested(), func(u string) bool { return strings.HasSuffix(u, "/"+marker) }) {
			return fmt.Errorf("the browser has not reported the page's request for %s", marker)
		}
		return nil
	})
	if got := slices.DeleteFunc(b.requested(), func(u string) bool { return !strings.Contains(u, "/api/v1/group") }); len(got) != 0 {
		t.Errorf("a standalone dashboard asked for the group: %v", got)
	}
	if got := evaluate[bool](b, `document.querySelector('#group').hidden && document.querySelector('#overview-partial').hidden && !document.querySelector('#dashboard').classList.contains('grouped')`); !got {
		t.Error("a standalone dashboard shows the group panel or a partial-view warning")
	}
	if got := evaluate[[]string](b, `performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/api/v1/group'))`); len(got) != 0 {
		t.Errorf("a standalone dashboard asked for the group: %v", got)
	}
	b.checkClean()
}

// A dashboard on a member of a group of two shows the group, both members
// and their partitions, complete; when the other member is killed, the
// overview says at once that it is partial and the panel that the views
// are incomplete, until this member has taken the dead one's partitions
// over (the lease, 4 s, and a replay) and both are complete again.
func TestBrowserGroupPanel(t *testing.T) {
	chromium := chromiumPath(t)
	url := natstest.Start(t).URL()
	args := []string{"--nats-url", url, "--group", "g", "--partitions", "8", "--push-interval", "100ms"}
	tm := startMain(t, append(args, "--instance", "m0")...)
	victim, _ := startBinary(t, append(args, "--instance", "m1", "--data-dir", t.TempDir())...)
	waitComplete(t, tm, 2)

	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	now := time.Now().UnixMilli()
	var evs []chat.Event
	for i := range 12 {
		evs = append(evs, chat.Event{Room: fmt.Sprint("room-", i%5), User: fmt.Sprint("u", i%3), TS: now})
	}
	publishGroup(t, url, evs)
	b.waitText("#messages", "12")

	b.wait("the group panel", `!document.querySelector('#group').hidden`)
	b.waitText("#group-name", "g")
	b.wait("both members", `[...document.querySelectorAll('#group-members tbody tr')].map(tr => tr.dataset.instance).join() === 'm0,m1'`)
	b.wait("a complete group", `document.querySelector('#group').dataset.complete === 'true'`)
	b.waitText("#group-coverage", "complete")
	b.waitText(`#group-members tr[data-instance="m0"] .self`, "this instance")
	b.waitText(`#group-members tr[data-instance="m1"] .self`, "")
	sub := evaluate[string](b, `document.querySelector('#group-sub').textContent`)
	for _, want := range []string{"this instance: m0", "2 members", "8 partitions"} {
		if !strings.Contains(sub, want) {
			t.Errorf("group panel says %q, want it to mention %q", sub, want)
		}
	}
	owned := evaluate[int](b, `[...document.querySelectorAll('#group-members td[data-col="owns"]')].reduce((n, td) => n + Number(td.textContent), 0)`)
	parts := evaluate[string](b, `[...document.querySelectorAll('#group-members td[data-col="partitions"]')].map(td => td.textContent).join('|')`)
	if owned != 8 {
		t.Errorf("the members own %d partitions (%s), want 8", owned, parts)
	}
	if got := evaluate[bool](b, `document.querySelector('#group-warning').hidden && document.querySelector('#overview-partial').hidden`); !got {
		t.Error("a complete group shows a partial warning")
	}
	artifacts := artifactsDir(t)
	b.screenshot(artifacts, "group.png")

	// Kill the other member: it no longer answers, so the views go
	// without its partitions until its lease runs out and m0 takes them.
	killed := time.Now()
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.Wait()
	b.wait("the overview's partial warning", `!document.querySelector('#overview-partial').hidden`)
	warning := evaluate[string](b, `document.querySelector('#overview-partial').textContent`)
	if !strings.Contains(warning, "of 8 partitions are missing") {
		t.Errorf("partial warning %q does not say how many of the 8 partitions are missing", warning)
	}
	b.wait("the panel's incomplete warning", `document.querySelector('#group').dataset.complete === 'false' && !document.querySelector('#group-warning').hidden`)
	b.waitText("#group-coverage", "incomplete")
	b.screenshot(artifacts, "group-incomplete.png")
	t.Logf("incomplete shown %v after SIGKILL: %q", time.Since(killed), evaluate[string](b, `document.querySelector('#group-warning').textContent`))

	b.wait("m0 alone, complete", `[...document.querySelectorAll('#group-members tbody tr')].map(tr => tr.dataset.instance).join() === 'm0' && document.querySelector('#group').dataset.complete === 'true'`)
	b.waitText(`#group-members tr[data-instance="m0"] td[data-col="owns"]`, "8")
	b.wait("the overview complete again", `document.querySelector('#overview-partial').hidden && document.querySelector('#group-warning').hidden`)
	b.waitText("#messages", "12")
	t.Logf("complete again %v after SIGKILL", time.Since(killed))

	// A phone: the panel scrolls nothing sideways.
	b.viewport(390, 844, true)
	b.wait("a phone-wide group panel", `document.documentElement.scrollWidth <= window.innerWidth`)
	b.screenshot(artifacts, "phone-group.png")
	b.checkClean()
}
