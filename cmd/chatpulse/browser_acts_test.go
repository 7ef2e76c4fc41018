package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/chatpulse/chatpulse/act"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// shownAct is an act as the moderation panel lists it.
type shownAct struct {
	Kind, User, Room, Policy, Skipped string
	Shadow                            bool
	What, End, Until                  string
}

// shownActs are the acts the panel lists, oldest first.
func shownActs(b *browser) []shownAct {
	b.t.Helper()
	acts := evaluate[[]shownAct](b, `[...document.querySelectorAll('#acts li')].map(li => ({
		Kind: li.dataset.kind, User: li.dataset.user, Room: li.dataset.room, Policy: li.dataset.policy,
		Skipped: li.dataset.skipped, Shadow: li.dataset.shadow === 'true',
		What: li.querySelector('.what').textContent, End: li.querySelector('.end').textContent,
		Until: li.querySelector('.end').getAttribute('datetime') || ''}))`)
	slices.Reverse(acts)
	return acts
}

// sameActs says how the acts the panel lists differ from those chatpulse
// published, in order; nil if they do not.
func sameActs(shown []shownAct, heard []act.Act) error {
	if len(shown) != len(heard) {
		return fmt.Errorf("the panel lists %d acts, chatpulse published %d: %+v; published: %+v", len(shown), len(heard), shown, heard)
	}
	for i, a := range heard {
		until := ""
		if a.Until != nil {
			b, _ := json.Marshal(a.Until)
			json.Unmarshal(b, &until)
		}
		s := shown[i]
		if s.Kind != string(a.Kind) || s.User != a.User || s.Room != a.Room || s.Policy != a.Policy || s.Skipped != a.Skipped || s.Shadow != a.Shadow || s.Skipped == "" && s.Until != until {
			return fmt.Errorf("act %d: the panel shows %+v, chatpulse published %+v", i, s, a)
		}
	}
	return nil
}

// listsHeard waits until the panel lists exactly the acts chatpulse
// published on NATS, in order, each as it was published.
func listsHeard(t *testing.T, b *browser, h *heard) []shownAct {
	t.Helper()
	var shown []shownAct
	wait.For(t, deliveryWait, func() error {
		shown = shownActs(b)
		return sameActs(shown, h.all())
	})
	return shown
}

// all is every act heard so far.
func (h *heard) all() []act.Act {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.acts)
}

// acted is a JavaScript expression: the panel's entry of the act of kind
// on user (any user if ""), shadow or not, or undefined.
func acted(kind act.Kind, user string, shadow bool) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#acts li')].find(li => li.dataset.kind === %s && (%s === '' || li.dataset.user === %s) && li.dataset.shadow === '%v')`,
		jsString(string(kind)), jsString(user), jsString(user), shadow)
}

// TestBrowserActs watches, in headless Chromium, the moderation panel of
// a chatpulse acting on a real Dendrite (--act matrix). Before any act
// the panel shows that chatpulse acts (a policy says so). Then, live over
// the websocket: a flooder's mute, saying the policy and until when, and
// the redactions of their messages; the room's moderator's mute, skipped
// because they are a moderator; in a room where the bot has no power, the
// lock of a join wave and a flooder's mute skipped for that, and the room
// listed as one where the bot lacks power (from GET /api/v1/act); then
// the flooder's unmute. The panel lists exactly the acts chatpulse
// published on NATS since it opened, in order.
func TestBrowserActs(t *testing.T) {
	chromium := chromiumPath(t)
	r := newActRoom(t)
	h := hear(t, r.url)
	tm := startMain(t, r.args...)
	r.sourced(t)
	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	b.wait("the panel to say chatpulse acts", `!document.querySelector('#acting').hidden && !document.querySelector('#acts-empty').hidden`)
	if evaluate[bool](b, `!document.querySelector('#acting-shadow').hidden`) {
		t.Error("shadow mode shown while chatpulse acts")
	}

	// Erin's room, where the bot has no power: its three joins are a
	// wave that the bot cannot lock.
	erin, carol := r.users["erin"], r.users["carol"]
	side := r.hs.createRoom(erin, "side")
	r.hs.join(r.bot, side)
	r.hs.join(carol, side)
	r.say("alice", 6)
	r.say("mod", 6)
	for i := range 5 {
		if _, err := r.hs.Send(carol, side, "m.room.message", map[string]any{"msgtype": "m.text", "body": fmt.Sprint("carol says ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	aliceID, modID, carolID := r.users["alice"].ID, r.mod.ID, carol.ID
	b.wait("alice's mute", acted(act.Mute, aliceID, false)+` !== undefined`)
	b.wait("a redaction of alice's messages", acted(act.Redact, aliceID, false)+` !== undefined`)
	b.wait("the moderator's mute, skipped", acted(act.Mute, modID, false)+`?.dataset.skipped === 'moderator'`)
	b.wait("carol's mute, skipped", acted(act.Mute, carolID, false)+`?.dataset.skipped === 'no_power'`)
	b.wait("the side room's lock, skipped", acted(act.Lock, "", false)+`?.dataset.skipped === 'no_power'`)
	b.wait("the room without power", fmt.Sprintf(`!document.querySelector('#no-power-box').hidden && [...document.querySelectorAll('#no-power li')].some(li => li.dataset.room === %s)`, jsString(side)))
	b.wait("alice's unmute", acted(act.Unmute, aliceID, false)+` !== undefined`)

	// What each says: who, where, why, until when.
	mute := evaluate[shownAct](b, `(li => ({What: li.querySelector('.what').textContent, End: li.querySelector('.end').textContent, Policy: li.querySelector('.policy').textContent}))(`+acted(act.Mute, aliceID, false)+`)`)
	if want := "muted " + aliceID + " in " + r.room; mute.What != want || mute.Policy != "user_room_flood" || !strings.HasPrefix(mute.End, "until ") {
		t.Errorf("alice's mute reads %+v, want %q by user_room_flood, until a time", mute, want)
	}
	if got := evaluate[string](b, acted(act.Redact, aliceID, false)+`.querySelector('.what').textContent`); got != "redacted a message of "+aliceID+" in "+r.room {
		t.Errorf("a redaction reads %q", got)
	}
	if got := evaluate[string](b, acted(act.Mute, modID, false)+`.textContent`); !strings.Contains(got, "did not mute "+modID) || !strings.HasSuffix(got, "a moderator of the room") {
		t.Errorf("the moderator's mute reads %q", got)
	}
	if got := evaluate[string](b, acted(act.Mute, carolID, false)+`.querySelector('.end').textContent`); got != "the bot lacks the power here" {
		t.Errorf("carol's mute ends %q", got)
	}
	if got := evaluate[string](b, `document.querySelector('#no-power li').textContent`); got != side+" cannot redact, mute (m.room.power_levels), lock (m.room.join_rules)" {
		t.Errorf("the room without power reads %q", got)
	}
	b.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('#acting').scrollIntoView()`))
	b.screenshot(artifactsDir(t), "moderation-acts.png")

	listsHeard(t, b, h)
	b.checkClean()
}

// TestBrowserActsShadow: with --act-mode shadow the panel says so, and
// every act reads as what chatpulse would have done: the mute, the
// redactions and the unmute of a flooder, none of which happened.
func TestBrowserActsShadow(t *testing.T) {
	chromium := chromiumPath(t)
	r := newActRoom(t)
	h := hear(t, r.url)
	tm := startMain(t, append(r.args, "--act-mode", "shadow")...)
	r.sourced(t)

	b := openBrowser(t, chromium, tm.url)
	b.navigate(tm.url + "/")
	b.wait("the websocket to connect", `document.querySelector('#status').dataset.state === 'connected'`)
	b.wait("shadow mode shown", `!document.querySelector('#acting').hidden && !document.querySelector('#acting-shadow').hidden`)

	alice := r.say("alice", 5)
	if len(alice) != 5 {
		t.Fatalf("alice posted %d of 5 messages: shadow mode muted her", len(alice))
	}
	aliceID := r.users["alice"].ID
	b.wait("alice's mute, as it would have been", acted(act.Mute, aliceID, true)+` !== undefined`)
	b.wait("alice's unmute, as it would have been", acted(act.Unmute, aliceID, true)+` !== undefined`)
	shown := listsHeard(t, b, h)
	for _, s := range shown {
		if !s.Shadow || !strings.HasPrefix(s.What, "would have ") {
			t.Errorf("in shadow mode, an act reads %+v", s)
		}
	}
	if got := evaluate[int](b, `document.querySelectorAll('#acts li.shadow').length`); got != len(shown) {
		t.Errorf("%d of %d acts marked shadow", got, len(shown))
	}
	if _, ok := r.level("alice"); ok {
		t.Error("shadow mode muted alice")
	}
	if r.redacted(t, alice[4]) {
		t.Error("shadow mode redacted alice's last message")
	}
	b.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('#acting').scrollIntoView()`))
	b.screenshot(artifactsDir(t), "moderation-acts-shadow.png")
	b.checkClean()
}
