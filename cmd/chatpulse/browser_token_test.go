package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/security"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestBrowserToken opens the dashboard of a chatpulse that needs a token
// and serves HTTPS with a self-signed certificate, in headless Chromium.
// The page asks for the token (a wrong one is refused and asked again),
// then shows live data over wss:, and keeps the token for the tab: a
// reload asks nothing.
func TestBrowserToken(t *testing.T) {
	chromium := chromiumPath(t)
	const token = "browser-t0ken"
	cert, key := selfSigned(t)
	tm := startMain(t, "--jetstream=false", "--tls-cert", cert, "--tls-key", key, "--auth-token", token)
	publishN(tm, "lobby", "alice", 3)
	tm.waitReceived(3)

	b := openBrowser(t, chromium, tm.url)
	b.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, security.SetIgnoreCertificateErrors, security.SetIgnoreCertificateErrorsParams{Ignore: true})
		return err
	}))
	b.expectNetworkErrors(true) // the 401s before the token is given
	b.navigate(tm.url + "/")
	const prompt = `dialog.token-prompt`
	b.wait("the token prompt", fmt.Sprintf(`document.querySelector(%q)?.open === true`, prompt))
	b.screenshot(artifactsDir(t), "token-prompt.png")
	b.do(chromedp.SendKeys(prompt+" input", "wrong"+kb.Enter))
	b.wait("the prompt again", fmt.Sprintf(`document.querySelector(%q)?.textContent.includes('refused') === true`, prompt))
	b.do(chromedp.SendKeys(prompt+" input", token+kb.Enter))
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	b.waitText("#top-talker", "alice")
	b.waitText("#messages", "3")
	if got := evaluate[string](b, `sessionStorage.getItem('chatpulse.token')`); got != token {
		t.Fatalf("sessionStorage holds %q", got)
	}

	// Live data comes over the websocket, which carries the token too.
	publishN(tm, "lobby", "bob", 5)
	b.waitText("#top-talker", "bob")

	// A reload keeps the token: no prompt, connected again.
	b.expectNetworkErrors(false)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect again", `document.querySelector('#status').dataset.state === 'connected'`)
	b.waitText("#messages", "8")
	if evaluate[bool](b, fmt.Sprintf(`document.querySelector(%q) !== null`, prompt)) {
		t.Fatal("asked for the token again after a reload")
	}
	b.checkClean()
	tm.token = token
	if missing, wrong := tm.metric(`chatpulse_auth_failures_total{reason="missing"}`), tm.metric(`chatpulse_auth_failures_total{reason="wrong"}`); missing < 1 || wrong < 1 {
		t.Fatalf("auth failures: missing %v, wrong %v", missing, wrong)
	}
}
