package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	tcpproxy "github.com/chatpulse/chatpulse/internal/proxy"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/traffic"
)

// deliveryWait bounds every wait for something asynchronous to show in the
// page. It is for delivery, never an assertion about speed.
const deliveryWait = 20 * time.Second

// TestBrowserDashboard opens the dashboard in headless Chromium, publishes
// chat events over NATS after the page is open, and checks that the page
// shows them live: the overview and its top-talker strip, the rooms table,
// a room's detail and the way back, a throttle alert and the key over its
// limit, joins beside the messages and a room marked under a raid (a
// join_wave policy over its limit), a busier load compared row by row
// with the HTTP API, and a phone
// layout without horizontal scrolling. The page must throw nothing, log no
// error and fetch nothing from anywhere but chatpulse. Screenshots go to
// $CHATPULSE_ARTIFACTS (or a temporary directory).
func TestBrowserDashboard(t *testing.T) {
	chromium := chromiumPath(t)
	// The default policies, and a join wave that holds for an hour once
	// crossed, however slow the machine.
	tm := startMain(t, "--policies", policiesFile(t, `policies:
  - {name: user_room_flood, scope: user_in_room, algorithm: sliding_window, limit: 10, window: 10s}
  - {name: user_flood, scope: user, algorithm: sliding_window, limit: 30, window: 1m}
  - {name: repeated_text, scope: user, algorithm: repeat, limit: 1, window: 30s, mode: shadow}
  - {name: raid, scope: room, algorithm: join_wave, limit: 3, window: 1h}
`))
	artifacts := artifactsDir(t)

	// The page reaches chatpulse through a proxy that can cut the network.
	proxy := tcpproxy.New(t, strings.TrimPrefix(tm.url, "http://"))
	proxied := "http://" + proxy.Addr()
	b := openBrowser(t, chromium, proxied)
	b.navigate(proxied + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	b.waitText("#status-text", "connected")

	var windows struct {
		Windows []struct{ Name string } `json:"windows"`
	}
	tm.get("/api/v1/windows", &windows)
	b.wait("a window button for each window", fmt.Sprintf(`document.querySelectorAll('#windows button[data-window]').length === %d`, len(windows.Windows)))

	// Everything below is published after the page is open: it must arrive
	// live, without a reload.
	const tricky = `<img src=x onerror="window.__xss=1">é`
	publishN(tm, "lobby", "alice", 5)
	publishN(tm, "lobby", "bob", 2)
	publishN(tm, "a/b", "carol", 3)
	publishN(tm, tricky, "dave", 1)

	b.waitText("#top-talker", "alice")
	b.waitText("#messages", "11")
	b.waitText("#distinct-users", "4")
	b.waitText("#active-rooms", "3")
	for _, w := range windows.Windows {
		b.waitText(fmt.Sprintf(`#talker-strip li[data-window=%q] .who`, w.Name), "alice")
	}
	b.waitText(`#rooms-table tr[data-room="lobby"] td[data-col="messages"]`, "7")
	b.waitText(`#rooms-table tr[data-room="a/b"] td[data-col="messages"]`, "3")
	b.waitText(`#top-users tbody tr:first-child td[data-col="user"]`, "alice")
	b.waitText(`#top-users tr[data-user="alice"] td[data-col="messages"]`, "5")

	// A room named like markup is shown as text, and nothing in it runs.
	b.wait("the room with markup in its name", fmt.Sprintf(
		`[...document.querySelectorAll('#rooms-table tbody tr')].some(tr => tr.dataset.room === %s && tr.querySelector('td[data-col="room"]').textContent === %[1]s)`, jsString(tricky)))
	if got := evaluate[bool](b, `window.__xss === undefined && document.querySelectorAll('main img').length === 0`); !got {
		t.Errorf("a room name was parsed as HTML")
	}
	b.screenshot(artifacts, "dashboard.png")

	// A room's detail: click its row, see it, click back.
	b.click(`#rooms-table tr[data-room="lobby"]`)
	b.wait("the room detail", `!document.querySelector('#room-detail').hidden && document.querySelector('#dashboard').hidden`)
	b.waitText("#room-title", "lobby")
	b.wait("the room's URL", `location.hash === '#/rooms/lobby'`)
	b.waitText("#room-messages", "7")
	b.waitText(`#room-top-users tbody tr:first-child td[data-col="user"]`, "alice")
	b.waitText(`#room-top-users tr[data-user="alice"] td[data-col="messages"]`, "5")
	b.waitText(`#room-top-users tr[data-user="bob"] td[data-col="messages"]`, "2")
	b.waitText("#room-top-talker", "alice")
	b.screenshot(artifacts, "room-detail.png")
	b.click("#back")
	b.wait("the dashboard after back", `!document.querySelector('#dashboard').hidden && document.querySelector('#room-detail').hidden`)
	b.wait("the dashboard's URL", `location.hash === '#/'`)

	// A room whose name needs escaping in the URL, and the browser's back.
	b.click(`#rooms-table tr[data-room="a/b"]`)
	b.waitText("#room-title", "a/b")
	b.wait("the escaped room URL", `location.hash === '#/rooms/a%2Fb'`)
	b.waitText(`#room-top-users tr[data-user="carol"] td[data-col="messages"]`, "3")
	b.do(chromedp.Evaluate[chromedp.Void](`history.back()`))
	b.wait("the dashboard after the browser's back", `!document.querySelector('#dashboard').hidden && document.querySelector('#room-detail').hidden`)

	// Crossing the default user_room_flood policy (10 in 10s) raises an
	// alert, and the key shows as over its limit now.
	b.do(chromedp.ScrollIntoView(chromedp.CSS("#moderation")))
	publishN(tm, "lobby", "mallory", 11)
	alert := `#alerts li[data-testid="alert"][data-user="mallory"][data-policy="user_room_flood"][data-room="lobby"]`
	b.wait("mallory's alert", fmt.Sprintf(`document.querySelector(%s) !== null`, jsString(alert)))
	text := evaluate[string](b, fmt.Sprintf(`document.querySelector(%s).textContent`, jsString(alert)))
	for _, want := range []string{"mallory", "lobby", "user_room_flood", "11/10"} {
		if !strings.Contains(text, want) {
			t.Errorf("alert %q does not mention %q", text, want)
		}
	}
	b.waitText("#alert-count", "1 alert")
	b.wait("mallory over the limit now", `document.querySelector('#active tr[data-user="mallory"][data-room="lobby"][data-policy="user_room_flood"]') !== null`)
	b.waitText("#top-talker", "mallory")

	// Joins are counted beside the messages, not as them; four of them
	// cross the raid policy, and the room is marked under a raid on the
	// overview and on its page (docs/contract.md section 12).
	publishJoins(tm, "lobby", 4)
	b.waitText("#joins", "4")
	b.waitText("#joins-sub", "1 leave in the last 1m")
	raid := `#raids a[data-testid="raid-room"][data-room="lobby"]`
	b.wait("lobby marked under a raid", fmt.Sprintf(`document.querySelector(%s) !== null && !document.querySelector('#raids').hidden`, jsString(raid)))
	b.waitText("#messages", "22")
	b.click(raid)
	b.waitText("#room-title", "lobby")
	b.waitText("#room-joins", "4")
	b.waitText("#room-messages", "18")
	b.wait("the raid badge beside the title", `!document.querySelector('#room-raid').hidden`)
	b.screenshot(artifacts, "room-raid.png")
	b.click("#back")
	b.wait("the dashboard after the raid", `!document.querySelector('#dashboard').hidden && document.querySelector('#room-raid').hidden`)

	// A busier load: hundreds of events over ~50 rooms and ~200 users,
	// spread over the last minute so the chart has a shape. The rooms table
	// must then match the API, row for row and in its order.
	g := traffic.New(traffic.Config{Rooms: 50, Users: 200, Seed: 7, Friendly: true, Flatten: 8})
	start := time.Now().Add(-55 * time.Second)
	for i := range 600 {
		at := start.Add(time.Duration(math.Sqrt(float64(i)/600) * float64(55*time.Second))) // busier toward now
		subject, payload, _, _, _ := g.Next(at)
		if err := tm.nc.Publish(subject, payload); err != nil {
			t.Fatal(err)
		}
	}
	var rooms struct {
		Rooms []struct {
			Room     string `json:"room"`
			Messages int64  `json:"messages"`
		} `json:"rooms"`
	}
	var want, got []string
	err := wait.Until(deliveryWait, func() error {
		tm.get("/api/v1/rooms?limit=1000", &rooms)
		want = want[:0]
		total := int64(0)
		for _, r := range rooms.Rooms {
			want = append(want, fmt.Sprintf("%s=%d", r.Room, r.Messages))
			total += r.Messages
		}
		got = evaluate[[]string](b, `[...document.querySelectorAll('#rooms-table tbody tr')].map(tr => tr.dataset.room + '=' + tr.querySelector('td[data-col="messages"]').textContent.replace(/\D/g, ''))`)
		if total < 11+11+600 {
			return fmt.Errorf("the API counts %d of %d messages", total, 11+11+600)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("the rooms table does not match the API:\n page %v\n api  %v", got, want)
		}
		return nil
	})
	if err != nil {
		b.failShot(artifacts)
		t.Fatal(err)
	}
	t.Logf("busy: %d rooms in the table", len(got))

	// The filter hides the rows that do not match.
	b.do(chromedp.SendKeys(chromedp.CSS("#room-filter"), "room-1"))
	b.wait("the filtered rooms", `[...document.querySelectorAll('#rooms-table tbody tr')].every(tr => tr.hidden === !tr.dataset.room.includes('room-1'))`)
	b.do(chromedp.Evaluate[chromedp.Void](`(f => { f.value = ''; f.dispatchEvent(new Event('input')); })(document.querySelector('#room-filter'))`))
	b.wait("all rooms again", `[...document.querySelectorAll('#rooms-table tbody tr')].every(tr => !tr.hidden)`)
	b.do(chromedp.Evaluate[chromedp.Void](`document.activeElement.blur(); window.scrollTo(0, 0)`))
	b.screenshot(artifacts, "dashboard-busy.png")

	// Another window: its button switches every number and the rooms list.
	last := windows.Windows[len(windows.Windows)-1].Name
	b.click(fmt.Sprintf(`#windows button[data-window=%q]`, last))
	b.wait("the window switch", fmt.Sprintf(`document.querySelector('#windows button[data-window=%q]').getAttribute('aria-pressed') === 'true'`, last))
	b.wait("the rooms list of "+last, fmt.Sprintf(`document.querySelector('#rooms-count').textContent.endsWith(%s)`, jsString("in the last "+last)))

	// A dropped connection: the page says so, retries with backoff and, once
	// chatpulse is reachable again, subscribes again by itself: what was
	// published meanwhile shows up.
	b.expectNetworkErrors(true)
	proxy.Refuse(true)
	proxy.Drop()
	b.wait("the page to see the drop", `document.querySelector('#status').dataset.state === 'reconnecting' && document.body.classList.contains('stale')`)
	b.wait("the reconnect countdown", `/^reconnecting in \d+s$/.test(document.querySelector('#status-text').textContent)`)
	b.screenshot(artifacts, "reconnecting.png")
	publishN(tm, "while-away", "zoe", 3)
	proxy.Refuse(false)
	b.wait("the reconnect", `document.querySelector('#status').dataset.state === 'connected'`)
	b.waitText(`#rooms-table tr[data-room="while-away"] td[data-col="messages"]`, "3")
	var overview struct{ Messages int64 }
	tm.get("/api/v1/overview?window="+url.QueryEscape(last), &overview)
	b.wait("the overview after the reconnect", fmt.Sprintf(`document.querySelector('#messages').textContent.replace(/\D/g, '') === '%d'`, overview.Messages))

	// The browser going offline shows at once, and online reconnects.
	b.setOnline(false)
	b.waitText("#status-text", "offline")
	b.setOnline(true)
	b.wait("the reconnect after offline", `document.querySelector('#status').dataset.state === 'connected'`)
	b.expectNetworkErrors(false)

	// A phone: no horizontal scrolling, on the dashboard or a room.
	b.viewport(390, 844, true)
	noScroll := `document.documentElement.scrollWidth <= window.innerWidth`
	b.wait("a phone-wide dashboard", noScroll)
	b.screenshot(artifacts, "phone-dashboard.png")
	b.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/rooms/lobby'`))
	b.waitText("#room-title", "lobby")
	b.wait("a phone-wide room", noScroll)
	b.screenshot(artifacts, "phone-room.png")

	b.checkClean()
}

// publishN publishes n messages from user in room, as a chat server would.
func publishN(tm *testMain, room, user string, n int) {
	tm.t.Helper()
	subject := "chat." + strings.NewReplacer(".", "_", " ", "_", "*", "_", ">", "_").Replace(room) + "." + user
	for i := range n {
		payload, _ := json.Marshal(map[string]string{"room": room, "user": user, "text": fmt.Sprintf("hi %d", i)})
		tm.publish(subject, string(payload))
	}
	if err := tm.nc.Flush(); err != nil {
		tm.t.Fatal(err)
	}
}

// publishJoins publishes n joins of new users to room, and one leave.
func publishJoins(tm *testMain, room string, n int) {
	tm.t.Helper()
	for i := range n {
		tm.publish(fmt.Sprintf("chat.%s.newcomer%d", room, i), fmt.Sprintf(`{"room":%q,"user":"newcomer%d","type":"join"}`, room, i))
	}
	tm.publish("chat."+room+".newcomer0", fmt.Sprintf(`{"room":%q,"user":"newcomer0","type":"leave"}`, room))
	if err := tm.nc.Flush(); err != nil {
		tm.t.Fatal(err)
	}
}

// chromiumPath finds Chromium, or skips the test without it; CI=true makes
// a missing Chromium a failure, since CI installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	return toolPath(t, "chromium", "the browser test", "chromium", "chromium-browser", "google-chrome-stable", "google-chrome")
}

// artifactsDir is $CHATPULSE_ARTIFACTS, created if needed, or a temporary
// directory.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CHATPULSE_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("CHATPULSE_ARTIFACTS: %v", err)
	}
	return dir
}

// browser is one headless Chromium tab and what it reported.
type browser struct {
	t      *testing.T
	ctx    context.Context
	origin string // the only origin the page may reach

	width, height int64 // the emulated screen, in CSS pixels
	mobile        bool

	mu         sync.Mutex
	problems   []string // exceptions, console and log errors, foreign requests
	requests   []string // the URLs the page asked for, as the browser reported them
	networkErr bool     // the network is cut on purpose: failed loads are expected
}

// requested is every URL the page has asked for so far, in the order the
// browser reported them.
func (b *browser) requested() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests)
}

// expectNetworkErrors tells listen whether the browser's errors about
// failed loads and sockets are expected (while the test cuts the network).
func (b *browser) expectNetworkErrors(on bool) {
	b.mu.Lock()
	b.networkErr = on
	b.mu.Unlock()
}

// setOnline makes the browser think the network is there or gone, as when
// a laptop loses its Wi-Fi: navigator.onLine and its events follow.
func (b *browser) setOnline(online bool) {
	b.t.Helper()
	b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.OverrideNetworkState, network.OverrideNetworkStateParams{
			Offline: !online, DownloadThroughput: -1, UploadThroughput: -1,
		})
		return err
	}))
}

func openBrowser(t *testing.T, chromium, base string) *browser {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, origin: u.Host}
	// The flags are spelled out rather than taken from
	// chromedp.DefaultExecAllocatorOptions: this closed network needs the
	// browser quiet, and root needs --no-sandbox. Without user-data-dir,
	// chromedp gives the browser a fresh temporary one and removes it, with
	// any process left using it, when the allocator is cancelled.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoSandbox,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.WindowSize(1600, 1000),
	}
	// Chromium now and then dies while starting on this machine (the first
	// action then fails with "chrome failed to start"): try again, a few
	// times, with a fresh process.
	for attempt := 1; ; attempt++ {
		err := b.start(opts)
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("starting %s: %v", chromium, err)
		}
		t.Logf("starting %s (attempt %d): %v", chromium, attempt, err)
	}
	b.viewport(1600, 1000, false)
	return b
}

// start runs a browser for b with opts, to be closed when the test ends.
func (b *browser) start(opts []chromedp.ExecAllocatorOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a last resort; waits are bounded on their own
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithListener(b.listen))
	stop := func() {
		if err := chromedp.Cancel(bctx); err != nil {
			b.t.Logf("closing the browser: %v", err)
		}
		bcancel()
		acancel() // waits for the browser to exit and its directory to go
		cancel()
	}
	// The first action starts the browser, with the lifetime of the context
	// it runs in: bctx itself, not one of the shorter contexts of the steps.
	// The dashboard is dark unless the system asks for light: show it so.
	err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
		})
		return err
	}))
	if err != nil {
		stop()
		return err
	}
	b.ctx = bctx
	b.t.Cleanup(stop)
	return nil
}

// listen records what the page must never do. It runs in chromedp's event
// loop: it only appends.
func (b *browser) listen(ev any) {
	var problem string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		problem = "exception: " + d.Text
		if d.Exception != nil {
			problem += " " + d.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			problem = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " "))
		}
	case *cdplog.EventEntryAdded:
		b.mu.Lock()
		expected := b.networkErr && ev.Entry.Source == cdplog.EntrySourceNetwork
		b.mu.Unlock()
		if ev.Entry.Level == cdplog.EntryLevelError && !expected {
			problem = fmt.Sprintf("log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		b.mu.Lock()
		b.requests = append(b.requests, ev.Request.URL)
		b.mu.Unlock()
		if u, err := url.Parse(ev.Request.URL); err != nil || u.Host != b.origin && u.Scheme != "data" && u.Scheme != "about" {
			problem = "request outside chatpulse: " + ev.Request.URL
		}
	case *network.EventWebSocketCreated:
		if u, err := url.Parse(ev.URL); err != nil || u.Host != b.origin {
			problem = "websocket outside chatpulse: " + ev.URL
		}
	}
	if problem != "" {
		b.mu.Lock()
		b.problems = append(b.problems, problem)
		b.mu.Unlock()
	}
}

// checkClean fails the test for anything listen recorded.
func (b *browser) checkClean() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("page: %s", p)
	}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, deliveryWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.failShot("")
		b.t.Fatal(err)
	}
}

func (b *browser) navigate(u string) { b.t.Helper(); b.do(chromedp.Navigate(u)) }

func (b *browser) click(sel string) {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(sel)))
}

// wait polls a JavaScript condition until it holds.
func (b *browser) wait(what, cond string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, deliveryWait+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond,
		chromedp.WithPollingTimeout(deliveryWait), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		b.failShot("")
		b.t.Fatalf("waiting for %s (%s): %v", what, cond, err)
	}
}

// waitText waits until the trimmed text of the element sel is want.
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	q := fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? '').trim()`, jsString(sel))
	ctx, cancel := context.WithTimeout(b.ctx, deliveryWait+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](q+" === "+jsString(want),
		chromedp.WithPollingTimeout(deliveryWait), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		got := evaluate[string](b, q)
		b.failShot("")
		b.t.Fatalf("%s: want %q, have %q (%v)", sel, want, got, err)
	}
}

func evaluate[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, deliveryWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// viewport emulates a screen width×height CSS pixels, a phone's if mobile.
func (b *browser) viewport(width, height int64, mobile bool) {
	b.t.Helper()
	b.width, b.height, b.mobile = width, height, mobile
	b.do(b.emulate(height))
}

func (b *browser) emulate(height int64) chromedp.Action[chromedp.Void] {
	if b.mobile {
		return chromedp.EmulateViewport(b.width, height, chromedp.EmulateMobile, chromedp.EmulateScale(2))
	}
	return chromedp.EmulateViewport(b.width, height)
}

// screenshot saves a full-page PNG into dir. The page skips drawing what is
// off screen (content-visibility), so the screen is made as tall as the
// page for the picture.
func (b *browser) screenshot(dir, name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, deliveryWait)
	defer cancel()
	height := evaluate[int64](b, `Math.ceil(document.documentElement.scrollHeight)`)
	twoFrames := chromedp.Evaluate[chromedp.Void](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))`, chromedp.EvalAwaitPromise)
	if err := chromedp.Do(ctx, b.emulate(max(height, b.height)), twoFrames); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := chromedp.Do(ctx, b.emulate(b.height), twoFrames); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
}

// failShot saves what the page looked like when a step failed, if it can.
func (b *browser) failShot(dir string) {
	if dir == "" {
		dir = os.Getenv("CHATPULSE_ARTIFACTS")
	}
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		path := filepath.Join(dir, "failure.png")
		if os.WriteFile(path, png, 0o644) == nil {
			b.t.Logf("screenshot of the failure: %s", path)
		}
	}
	b.checkClean()
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
