package throttle

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

const t0 = int64(1_764_489_600_000) // 2025-11-30T08:00:00Z

func at(ms int64) int64 { return t0 + ms }

// ct is at as the answers carry it.
func ct(ms int64) chat.Time { return chat.Time(t0 + ms) }

func mustSet(t testing.TB, ps []Policy, opts ...Option) *Set {
	t.Helper()
	s, err := NewSet(ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decision(t *testing.T, r Result, policy string) Decision {
	t.Helper()
	for _, d := range r.Decisions {
		if d.Policy == policy {
			return d
		}
	}
	t.Fatalf("no decision of %s in %+v", policy, r)
	return Decision{}
}

// The contract's example: user_room_flood (10 per 10s) says "denied" after 10
// messages; the 11th alerts, once; after the window passes and a message is
// allowed, a new crossing alerts again.
func TestDefaultFloodAlertsOncePerCrossing(t *testing.T) {
	s := mustSet(t, DefaultPolicies())
	for i := range 10 {
		if a := s.Observe(chat.Event{TS: at(int64(i) * 100), Room: "lobby", User: "alice", Text: fmt.Sprint("msg ", i)}); a != nil {
			t.Fatalf("message %d alerted: %+v", i+1, a)
		}
	}
	r := s.Check(at(1000), "lobby", "alice", "", false)
	d := decision(t, r, "user_room_flood")
	if r.Allowed || d.Allowed || d.Count != 10 || d.Limit != 10 || d.Remaining != 0 {
		t.Fatalf("after 10: %+v", r)
	}
	// The oldest message (bucket 0s) leaves at 10s.
	if d.RetryAfterMs != 9000 {
		t.Errorf("retry_after_ms = %d, want 9000", d.RetryAfterMs)
	}
	if s.Check(at(1000), "other-room", "alice", "", false).Allowed != true {
		t.Error("alice is denied in another room")
	}
	a := s.Observe(chat.Event{TS: at(1000), Room: "lobby", User: "alice", Text: "eleven"})
	want := []Alert{{Policy: "user_room_flood", Room: "lobby", User: "alice", Count: 11, Limit: 10, At: ct(1000)}}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("11th: alerts %+v, want %+v", a, want)
	}
	if a := s.Observe(chat.Event{TS: at(1100), Room: "lobby", User: "alice", Text: "twelve"}); a != nil {
		t.Fatalf("12th alerted again: %+v", a)
	}
	if d := decision(t, s.Check(at(1200), "lobby", "alice", "", false), "user_room_flood"); d.Count != 12 {
		t.Errorf("count after 12 = %d", d.Count)
	}
	if act := s.Active(at(1200)); len(act) != 1 || act[0].Policy != "user_room_flood" || act[0].Count != 12 || act[0].Since != ct(1000) {
		t.Errorf("Active = %+v", act)
	}
	// The window passes: allowed again, which clears the mark.
	if a := s.Observe(chat.Event{TS: at(12_000), Room: "lobby", User: "alice", Text: "back"}); a != nil {
		t.Fatalf("allowed message alerted: %+v", a)
	}
	if act := s.Active(at(12_000)); len(act) != 0 {
		t.Errorf("Active after the window = %+v", act)
	}
	var alerts []Alert
	for i := range 10 {
		alerts = append(alerts, s.Observe(chat.Event{TS: at(12_100 + int64(i)), Room: "lobby", User: "alice", Text: fmt.Sprint("again ", i)})...)
	}
	if len(alerts) != 1 || alerts[0].Policy != "user_room_flood" || alerts[0].Count != 11 {
		t.Fatalf("second crossing: %+v", alerts)
	}
}

func TestShadowNeverDenies(t *testing.T) {
	ps := []Policy{{Name: "shadow_flood", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 2, Window: time.Minute, Mode: ModeShadow}}
	s := mustSet(t, ps)
	for i := range 5 {
		if a := s.Observe(chat.Event{TS: at(int64(i)), Room: "r", User: "u"}); a != nil {
			t.Fatalf("shadow policy alerted: %+v", a)
		}
	}
	r := s.Check(at(10), "r", "u", "", false)
	d := decision(t, r, "shadow_flood")
	if !r.Allowed || d.Allowed || d.Mode != ModeShadow || d.Count != 5 || d.RetryAfterMs != 60_000-10 {
		t.Fatalf("%+v", r)
	}
	if act := s.Active(at(10)); len(act) != 0 {
		t.Errorf("shadow key is active: %+v", act)
	}
	if st := s.Stats()[0]; st.ShadowDenied != 1 || st.Denied != 0 || st.Allowed != 0 {
		t.Errorf("stats %+v", st)
	}
	if got, want := s.DecisionLabels(), []DecisionLabel{{"shadow_flood", "allowed"}, {"shadow_flood", "shadow_denied"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("labels %v", got)
	}
}

// Replay sets the marks as live messages do, and the caller drops the
// alerts of replayed events, by their index: a crossing that happened
// during replay is not alerted again by the first live message.
func TestReplayKeepsMarks(t *testing.T) {
	s := mustSet(t, DefaultPolicies())
	replayed := make([]chat.Event, 12)
	for i := range replayed {
		replayed[i] = chat.Event{TS: at(int64(i)), Room: "lobby", User: "bob"}
	}
	var alerted []int
	s.ObserveBatch(replayed, func(i int, _ Alert) { alerted = append(alerted, i) }, nil)
	if !slices.Equal(alerted, []int{10}) {
		t.Fatalf("replayed events alerted at %v, want the 11th (10)", alerted)
	}
	if act := s.Active(at(20)); len(act) != 1 || act[0].Since != ct(10) {
		t.Fatalf("Active after replay = %+v", act)
	}
	if a := s.Observe(chat.Event{TS: at(20), Room: "lobby", User: "bob"}); a != nil {
		t.Fatalf("live message after replay re-alerted: %+v", a)
	}
}

func TestRepeat(t *testing.T) {
	s := mustSet(t, DefaultPolicies())
	s.Observe(chat.Event{TS: at(0), Room: "lobby", User: "carol", Text: "  Buy   CHEAP\tstuff "})
	r := s.Check(at(1000), "other", "carol", "buy cheap stuff", true)
	d := decision(t, r, "repeated_text")
	if !r.Allowed || d.Allowed || d.Count != 1 || d.Limit != 1 || d.RetryAfterMs != 29_000 || d.Mode != ModeShadow {
		t.Fatalf("%+v", r)
	}
	if r := s.Check(at(1000), "lobby", "carol", "buy cheap stuff!", true); !decision(t, r, "repeated_text").Allowed {
		t.Errorf("another text is a repeat: %+v", r)
	}
	for _, r := range []Result{s.Check(at(1000), "lobby", "carol", "", false), s.Check(at(1000), "lobby", "carol", " \n", true)} {
		for _, d := range r.Decisions {
			if d.Policy == "repeated_text" {
				t.Errorf("repeat decided without text: %+v", r)
			}
		}
	}
	// Enforcing: the second identical message alerts.
	ps := []Policy{{Name: "dup", Scope: ScopeUserInRoom, Algorithm: AlgRepeat, Limit: 1, Window: 30 * time.Second}}
	s = mustSet(t, ps)
	if a := s.Observe(chat.Event{TS: at(0), Room: "lobby", User: "dave", Text: "spam"}); a != nil {
		t.Fatal(a)
	}
	if a := s.Observe(chat.Event{TS: at(1), Room: "lobby", User: "dave", Text: "SPAM"}); len(a) != 1 || a[0].Policy != "dup" || a[0].User != "dave" {
		t.Fatalf("second occurrence: %+v", a)
	}
	if a := s.Observe(chat.Event{TS: at(2), Room: "lobby", User: "dave"}); a != nil {
		t.Fatalf("message without text: %+v", a)
	}
}

// A repeat policy keeps hashes, not names: Active must still name its keys,
// after they cross again, after their place is reused, and after Sweep
// compacts the table.
func TestRepeatActiveNames(t *testing.T) {
	ps := []Policy{{Name: "dup", Scope: ScopeUserInRoom, Algorithm: AlgRepeat, Limit: 1, Window: time.Second}}
	s := mustSet(t, ps)
	want := func(now int64, keys ...string) {
		t.Helper()
		var got []string
		for _, a := range s.Active(at(now)) {
			got = append(got, a.Room+"/"+a.User)
		}
		if !reflect.DeepEqual(got, keys) {
			t.Fatalf("at %d: Active names %q, want %q", now, got, keys)
		}
	}
	for i := range 2000 { // fills the slabs, then mostly frees them
		s.Observe(chat.Event{TS: at(0), Room: "filler", User: fmt.Sprint("u", i), Text: "x"})
	}
	room, user := []byte("lobby"), []byte("dave")
	s.Observe(chat.Event{TS: at(10), Room: unsafeString(room), User: unsafeString(user), Text: "spam"})
	s.Observe(chat.Event{TS: at(20), Room: unsafeString(room), User: unsafeString(user), Text: "spam"})
	copy(room, "xxxxx")
	copy(user, "yyyy")
	want(30, "lobby/dave")
	s.Observe(chat.Event{TS: at(2000), Room: "lobby", User: "dave", Text: "spam"}) // allowed again: no longer over
	want(2000)
	s.Observe(chat.Event{TS: at(2001), Room: "lobby", User: "dave", Text: "spam"})
	want(2001, "lobby/dave")
	s.Observe(chat.Event{TS: at(2002), Room: "hall", User: "erin", Text: "eggs"})
	s.Observe(chat.Event{TS: at(2003), Room: "hall", User: "erin", Text: "eggs"})
	s.Sweep(at(2500))
	if tb := s.state.Load().stores[0].(*table[repeatState, int64, repeatKernel]); len(tb.states) > 8 {
		t.Fatalf("not compacted: %d places", len(tb.states))
	}
	want(2500, "hall/erin", "lobby/dave")
	s.Sweep(at(5000))
	want(5000)
	s.Observe(chat.Event{TS: at(5001), Room: "attic", User: "fay", Text: "spam"}) // reuses a place
	s.Observe(chat.Event{TS: at(5002), Room: "attic", User: "fay", Text: "spam"})
	want(5002, "attic/fay")
}

func TestTextNormalization(t *testing.T) {
	same := [][]string{
		{"hello world", "  Hello   WORLD ", "hello\t\n world", "HELLO\u00a0world", "hello\u3000world\u2003"},
		{"straße", "STRAẞE"},
		{"ΣΊΣΥΦΟΣ", "σίσυφος", "σίσυφοσ"},
		{"k", "K", "\u212a"},
	}
	hk := newHashKey()
	for _, group := range same {
		h0, _ := hk.textHash(group[0])
		for _, s := range group[1:] {
			if h, _ := hk.textHash(s); h != h0 {
				t.Errorf("%q and %q hash apart", group[0], s)
			}
		}
	}
	differ := []string{"hello world", "helloworld", "hello  world!", "hello world 2", "ab", "ba", "a b"}
	seen := map[uint64]string{}
	for _, s := range differ {
		h, _ := hk.textHash(s)
		if prev, dup := seen[h]; dup && !strings.EqualFold(strings.Join(strings.Fields(prev), " "), strings.Join(strings.Fields(s), " ")) {
			t.Errorf("%q and %q hash alike", prev, s)
		}
		seen[h] = s
	}
	for _, s := range []string{"", " ", "\t\n\u00a0"} {
		if _, ok := hk.textHash(s); ok {
			t.Errorf("%q is not empty", s)
		}
	}
}

// textHash must hash exactly the normalized text, short or long (the
// buffer is written out in pieces), whatever mix of white space, case,
// non-ASCII and invalid UTF-8 it has.
func TestTextHashIsHashOfNormalized(t *testing.T) {
	pieces := []string{"a", "Z", "k", "\u212a", " ", "  ", "\t", "\n", "\u00a0", "\u3000", "ß", "ẞ", "Σ", "ς", "日本", "\xff", "\xe2\x82", "!", "0"}
	var texts []string
	for n := 70; n < 270; n++ { // around the ends of pieces
		for _, end := range []string{" ", "  \u00a0", " b", "日", "\xe2\x82 x", "\xe2\x82\xac", "\U0008a1f4\x8f", "\u20ac\x80\x80\x80"} {
			texts = append(texts, strings.Repeat("a", n)+end, strings.Repeat("a ", n/2)+end, strings.Repeat(" ", n)+end)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 3000 {
		var b strings.Builder
		for range r.IntN(400) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		texts = append(texts, b.String())
	}
	hk := newHashKey()
	for _, s := range texts {
		want := normalized(s)
		h, ok := hk.textHash(s)
		if ok != (want != "") || h != hk.hash(hk.text, []byte(want)) {
			t.Fatalf("textHash(%q) = %x, %v; want the hash of %q", s, h, ok, want)
		}
	}
}

func TestScopesGroupsAndRooms(t *testing.T) {
	ps := []Policy{
		{Name: "support", Scope: ScopeGroup, Algorithm: AlgTokenBucket, Limit: 1, Window: time.Second, Burst: 3, Rooms: []string{"support-*", "help?"}},
		{Name: "rooms", Scope: ScopeRoom, Algorithm: AlgGCRA, Limit: 2, Window: time.Minute},
		{Name: "everything", Scope: ScopeGroup, Algorithm: AlgSlidingWindowCounter, Limit: 100, Window: time.Minute},
	}
	s := mustSet(t, ps)
	s.Observe(chat.Event{TS: at(0), Room: "support-eu", User: "u1"})
	s.Observe(chat.Event{TS: at(0), Room: "support-us/west", User: "u2"})
	s.Observe(chat.Event{TS: at(0), Room: "help1", User: "u3"})
	a := s.Observe(chat.Event{TS: at(0), Room: "support-x", User: "u4"})
	if len(a) != 1 || a[0] != (Alert{Policy: "support", Count: 3, Limit: 3, At: ct(0)}) {
		t.Fatalf("group alert: %+v", a)
	}
	if r := s.Check(at(0), "lobby", "u1", "", false); len(r.Decisions) != 2 || r.Decisions[0].Policy != "rooms" {
		t.Errorf("lobby sees the support group: %+v", r)
	}
	if r := s.Check(at(0), "help12", "u1", "", false); len(r.Decisions) != 2 {
		t.Errorf("help12 matches help?: %+v", r)
	}
	s.Observe(chat.Event{TS: at(0), Room: "lobby", User: "u1"})
	s.Observe(chat.Event{TS: at(0), Room: "lobby", User: "u2"})
	a = s.Observe(chat.Event{TS: at(0), Room: "lobby", User: "u3"})
	if len(a) != 1 || a[0].Policy != "rooms" || a[0].Room != "lobby" || a[0].User != "" || a[0].Count != 2 || a[0].Limit != 2 {
		t.Fatalf("room alert: %+v", a)
	}
	want := []Active{
		{Policy: "support", Count: 3, Limit: 3, Since: ct(0)},
		{Policy: "rooms", Room: "lobby", Count: 2, Limit: 2, Since: ct(0)},
	}
	if got := s.Active(at(10)); !reflect.DeepEqual(got, want) {
		t.Errorf("Active = %+v, want %+v", got, want)
	}
	d := decision(t, s.Check(at(10), "support-eu", "zed", "", false), "everything")
	if d.Count != 7 || !d.Allowed {
		t.Errorf("group without rooms: %+v", d)
	}
}

func TestJSONShapes(t *testing.T) {
	s := mustSet(t, DefaultPolicies())
	b, _ := json.Marshal(s.Check(time.Date(2026, 11, 30, 7, 0, 0, 123_456_789, time.UTC).UnixMilli(), "lobby", "alice", "hi", true))
	want := `{"allowed":true,"as_of":"2026-11-30T07:00:00.123Z","room":"lobby","user":"alice","decisions":[` +
		`{"policy":"user_room_flood","scope":"user_in_room","algorithm":"sliding_window","mode":"enforce","allowed":true,"count":0,"limit":10,"remaining":10,"retry_after_ms":0},` +
		`{"policy":"user_flood","scope":"user","algorithm":"sliding_window","mode":"enforce","allowed":true,"count":0,"limit":30,"remaining":30,"retry_after_ms":0},` +
		`{"policy":"repeated_text","scope":"user","algorithm":"repeat","mode":"shadow","allowed":true,"count":0,"limit":1,"remaining":1,"retry_after_ms":0}]}`
	if string(b) != want {
		t.Errorf("Result JSON\n got %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(Alert{Policy: "p", Room: "r", User: "u", Count: 11, Limit: 10, At: 0})
	if want := `{"policy":"p","room":"r","user":"u","count":11,"limit":10,"at":"1970-01-01T00:00:00.000Z"}`; string(b) != want {
		t.Errorf("Alert JSON %s", b)
	}
	b, _ = json.Marshal(Active{Policy: "p", Room: "r", Count: 11, Limit: 10, Since: 1})
	if want := `{"policy":"p","room":"r","user":"","count":11,"limit":10,"since":"1970-01-01T00:00:00.001Z"}`; string(b) != want {
		t.Errorf("Active JSON %s", b)
	}
	b, _ = json.Marshal(mustSet(t, nil).Check(0, "r", "u", "", false))
	if !strings.Contains(string(b), `"decisions":[]`) {
		t.Errorf("no policies: %s", b)
	}
}

// allPolicies has one policy per algorithm and scope mix, enforcing.
func allPolicies() []Policy {
	return []Policy{
		{Name: "sw", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 4, Window: 2 * time.Second, Resolution: 250 * time.Millisecond},
		{Name: "swc", Scope: ScopeUser, Algorithm: AlgSlidingWindowCounter, Limit: 5, Window: time.Second},
		{Name: "fw", Scope: ScopeRoom, Algorithm: AlgFixedWindow, Limit: 6, Window: time.Second},
		{Name: "tb", Scope: ScopeUser, Algorithm: AlgTokenBucket, Limit: 2, Window: time.Second, Burst: 4},
		{Name: "gcra", Scope: ScopeUserInRoom, Algorithm: AlgGCRA, Limit: 3, Window: time.Second, Burst: 2},
		{Name: "rep", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 2, Window: 1500 * time.Millisecond},
		{Name: "grp", Scope: ScopeGroup, Algorithm: AlgSlidingWindow, Limit: 50, Window: time.Second, Resolution: 100 * time.Millisecond, Rooms: []string{"r1", "r*2"}},
	}
}

// TestSetMatchesStandalone drives a Set and one standalone limiter per
// (policy, key) with the same in-order traffic from many users and rooms, with
// a small key cap and sweeps: keys forgotten at rest, or by Sweep, must not
// change a single answer.
func TestSetMatchesStandalone(t *testing.T) {
	ps := allPolicies()
	s := mustSet(t, ps)
	ref := map[string]Limiter{}
	limiter := func(p Policy, key string) Limiter {
		k := p.Name + "\x00" + key
		if l, ok := ref[k]; !ok {
			switch p.Algorithm {
			case AlgSlidingWindow:
				ref[k] = NewSlidingWindow(p.Limit, p.Window, p.Resolution)
			case AlgSlidingWindowCounter:
				ref[k] = NewSlidingWindowCounter(p.Limit, p.Window)
			case AlgFixedWindow:
				ref[k] = NewFixedWindow(p.Limit, p.Window)
			case AlgTokenBucket:
				ref[k] = NewTokenBucket(p.Limit, p.Window, p.Burst)
			case AlgGCRA:
				ref[k] = NewGCRA(p.Limit, p.Window, p.Burst)
			case AlgRepeat:
				ref[k] = NewRepeat(p.Limit, p.Window)
			}
		} else {
			return l
		}
		return ref[k]
	}
	keyFor := func(p Policy, room, user, text string) string {
		r, u := keyOf(p.Scope, room, user)
		if p.Algorithm == AlgRepeat {
			h, _ := s.state.Load().hk.textHash(text)
			return fmt.Sprint(r, "\x00", u, "\x00", h)
		}
		return r + "\x00" + u
	}
	sees := func(p Policy, room string) bool {
		if len(p.Rooms) == 0 {
			return true
		}
		return room == "r1" || strings.HasPrefix(room, "r") && strings.HasSuffix(room, "2")
	}
	r := rand.New(rand.NewPCG(1, 2))
	now := int64(0)
	steps := 20_000
	if testing.Short() || raceEnabled {
		steps = 5000
	}
	for step := range steps {
		now += []int64{0, 1, 7, 40, 300, 3000}[r.IntN(6)]
		room, user := fmt.Sprint("r", r.IntN(4)), fmt.Sprint("u", r.IntN(12))
		if strings.HasSuffix(user, "1") || room == "r3" { // names too long to keep in an entry
			user += strings.Repeat("-", keyInline)
		}
		text := []string{"a", "A ", "b", "c"}[r.IntN(4)]
		if r.IntN(50) == 0 {
			s.Sweep(at(now))
		}
		if r.IntN(2) == 0 {
			s.Observe(chat.Event{TS: at(now), Room: room, User: user, Text: text})
			for _, p := range ps {
				if sees(p, room) {
					limiter(p, keyFor(p, room, user, text)).Hit(tm(at(now)))
				}
			}
			continue
		}
		res := s.Check(at(now), room, user, text, true)
		i := 0
		for _, p := range ps {
			if !sees(p, room) {
				continue
			}
			v := limiter(p, keyFor(p, room, user, text)).Decide(tm(at(now)))
			d := res.Decisions[i]
			i++
			if d.Policy != p.Name || d.Allowed != v.Allowed || d.Count != v.Count || d.Limit != v.Limit || d.Remaining != v.Remaining || d.RetryAfterMs != v.RetryAfter.Milliseconds() {
				t.Fatalf("step %d, %s %s at %d: Set says %+v, standalone %+v", step, room, user, now, d, v)
			}
		}
		if i != len(res.Decisions) {
			t.Fatalf("step %d: %d decisions, want %d", step, len(res.Decisions), i)
		}
	}
	evicted := uint64(0)
	for _, st := range s.Stats() {
		evicted += st.Expired
	}
	if evicted == 0 {
		t.Error("no key was ever forgotten at rest: the test does not test eviction")
	}
}

// Check must not change anything a later answer depends on: two Sets fed
// the same messages, one of them also checked all the time (at any instant,
// including far in the future and the past), answer alike.
func TestCheckIsReadOnly(t *testing.T) {
	a, b := mustSet(t, allPolicies(), WithMaxKeys(8)), mustSet(t, allPolicies(), WithMaxKeys(8))
	r := rand.New(rand.NewPCG(3, 4))
	now := int64(0)
	for step := range 3000 {
		now += r.Int64N(200)
		room, user, text := fmt.Sprint("r", r.IntN(3)), fmt.Sprint("u", r.IntN(6)), fmt.Sprint(r.IntN(3))
		for range 3 {
			a.Check(at(now+r.Int64N(20_000)-5000), fmt.Sprint("r", r.IntN(4)), fmt.Sprint("u", r.IntN(8)), text, r.IntN(2) == 0)
		}
		late := now - r.Int64N(500)
		if x, y := a.Observe(chat.Event{TS: at(late), Room: room, User: user, Text: text}), b.Observe(chat.Event{TS: at(late), Room: room, User: user, Text: text}); !reflect.DeepEqual(x, y) {
			t.Fatalf("step %d: alerts %+v vs %+v", step, x, y)
		}
		if x, y := a.Check(at(now), room, user, text, true), b.Check(at(now), room, user, text, true); !reflect.DeepEqual(x, y) {
			t.Fatalf("step %d: %+v vs %+v", step, x, y)
		}
		if x, y := a.Active(at(now)), b.Active(at(now)); !reflect.DeepEqual(x, y) {
			t.Fatalf("step %d: active %+v vs %+v", step, x, y)
		}
	}
}

// ObserveBatch is Observe in a loop: the same alerts in the same order, and
// the same state after, whatever the batch sizes (some longer than the
// pieces it locks for), replay flags, late messages and key cap.
func TestObserveBatchIsObserveInALoop(t *testing.T) {
	ps := append(DefaultPolicies(), allPolicies()...)
	one, batch := mustSet(t, ps, WithMaxKeys(50)), mustSet(t, ps, WithMaxKeys(50))
	r := rand.New(rand.NewPCG(7, 8))
	now := int64(0)
	var evs []chat.Event
	var replay []bool // the caller drops the alerts of replayed events
	var want, got []Alert
	for range 200 {
		evs, replay = evs[:0], replay[:0]
		for range r.IntN(3 * batchChunk) {
			now += r.Int64N(40)
			evs = append(evs, chat.Event{
				TS:   at(now - r.Int64N(300)),
				Room: fmt.Sprint("r", r.IntN(4)),
				User: fmt.Sprint("u", r.IntN(30)),
				Text: []string{"", "a", "A ", "b", " "}[r.IntN(5)],
			})
			replay = append(replay, r.IntN(4) == 0)
		}
		for i, e := range evs {
			if a := one.Observe(e); !replay[i] {
				want = append(want, a...)
			}
		}
		batch.ObserveBatch(evs, func(i int, a Alert) {
			if !replay[i] {
				got = append(got, a)
			}
		}, nil)

		if !reflect.DeepEqual(got, want) {
			t.Fatalf("alerts\n got %+v\nwant %+v", got, want)
		}
		if x, y := batch.Active(at(now)), one.Active(at(now)); !reflect.DeepEqual(x, y) {
			t.Fatalf("active\n got %+v\nwant %+v", x, y)
		}
		for _, u := range []string{"u0", "u1", "u2"} {
			if x, y := batch.Check(at(now), "r1", u, "a", true), one.Check(at(now), "r1", u, "a", true); !reflect.DeepEqual(x, y) {
				t.Fatalf("check\n got %+v\nwant %+v", x, y)
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("no alerts: the test tests nothing")
	}
	if x, y := batch.Stats(), one.Stats(); !reflect.DeepEqual(x, y) {
		t.Errorf("stats\n got %+v\nwant %+v", x, y)
	}
	batch.ObserveBatch(nil, nil, nil)
	batch.ObserveBatch(evs, nil, nil)
}

func TestObserveDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := mustSet(t, append(DefaultPolicies(), allPolicies()...))
	room, user := []byte("lobby"), []byte("alice")
	text := "the same text, again"
	s.Observe(chat.Event{TS: at(0), Room: string(room), User: string(user), Text: text})
	now := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now += 3
		s.Observe(chat.Event{TS: at(now), Room: unsafeString(room), User: unsafeString(user), Text: text})
	})
	if allocs != 0 {
		t.Errorf("Observe on tracked keys: %v allocations, want 0", allocs)
	}
	evs := make([]chat.Event, 3*batchChunk)
	allocs = testing.AllocsPerRun(1000, func() {
		now += 3
		for i := range evs {
			evs[i] = chat.Event{TS: at(now), Room: unsafeString(room), User: unsafeString(user), Text: text}
		}
		s.ObserveBatch(evs, func(int, Alert) {}, nil)
	})
	if allocs != 0 {
		t.Errorf("ObserveBatch on tracked keys: %v allocations, want 0", allocs)
	}
}

// The caller's strings may alias a buffer it reuses: what the Set keeps
// must not change when the buffer does.
func TestKeysAreCloned(t *testing.T) {
	for _, room := range []string{"room-A", "room-A" + strings.Repeat("-", keyInline)} { // kept in the entry, and not
		s := mustSet(t, DefaultPolicies())
		buf := []byte(room)
		for i := range 11 {
			s.Observe(chat.Event{TS: at(int64(i)), Room: unsafeString(buf), User: "zoe"})
		}
		copy(buf, "room-B")
		if act := s.Active(at(20)); len(act) != 1 || act[0].Room != room || act[0].User != "zoe" {
			t.Fatalf("Active = %+v", act)
		}
		if d := decision(t, s.Check(at(20), room, "zoe", "", false), "user_room_flood"); d.Count != 11 {
			t.Fatalf("%s count %d", room, d.Count)
		}
	}
}

// Memory follows the live keys: a flood of distinct keys stays within the
// cap (counting evictions), and keys that go idle are forgotten without
// the cap ever being reached.
func TestKeysStayBounded(t *testing.T) {
	s := mustSet(t, allPolicies(), WithMaxKeys(1000))
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	for i := range n {
		s.Observe(chat.Event{TS: at(0), Room: fmt.Sprint("room", i), User: fmt.Sprint("user", i), Text: "x"})
	}
	for _, st := range s.Stats() {
		if st.Keys > 1000 {
			t.Errorf("%s: %d keys tracked, cap 1000", st.Policy, st.Keys)
		}
		if st.Policy != "grp" && st.Evicted != uint64(n-1000) {
			t.Errorf("%s: %d evicted, want %d", st.Policy, st.Evicted, n-1000)
		}
	}
	// One new key per 100ms, each sending one message: only the keys of
	// the last window or so are live.
	s = mustSet(t, allPolicies(), WithMaxKeys(1000))
	for i := range n {
		s.Observe(chat.Event{TS: at(int64(i) * 100), Room: fmt.Sprint("room", i), User: fmt.Sprint("user", i), Text: "x"})
	}
	for _, st := range s.Stats() {
		if st.Keys > 30 || st.Evicted != 0 {
			t.Errorf("%s: %d keys tracked, %d evicted by the cap", st.Policy, st.Keys, st.Evicted)
		}
	}
	if s.Sweep(at(int64(n)*100 + 60_000)); s.Stats()[0].Keys != 0 {
		t.Errorf("keys left after Sweep: %+v", s.Stats())
	}
}

func TestSweepCompacts(t *testing.T) {
	s := mustSet(t, allPolicies()[:1])
	for i := range 5000 {
		s.Observe(chat.Event{TS: at(0), Room: "r", User: fmt.Sprint("u", i)})
	}
	s.Observe(chat.Event{TS: at(1000), Room: "r", User: "keep"})
	if n := s.Sweep(at(2500)); n != 5000 {
		t.Errorf("Sweep forgot %d keys, want 5000", n)
	}
	tb := s.state.Load().stores[0].(*table[slidingState, uint32, slidingKernel])
	if len(tb.states) > 8 || tb.index.n != 1 || len(tb.index.slots) > 8 {
		t.Errorf("after compaction: %d slots, %d in the index of %d slots", len(tb.states), tb.index.n, len(tb.index.slots))
	}
	if d := s.Check(at(2500), "r", "keep", "", false).Decisions[0]; d.Count != 1 {
		t.Errorf("kept key lost its count: %+v", d)
	}
	for i := range 3000 { // the slabs grow again from the compacted state
		s.Observe(chat.Event{TS: at(2600), Room: "r", User: fmt.Sprint("v", i)})
	}
	if st := s.Stats()[0]; st.Keys != 3001 {
		t.Errorf("keys %d", st.Keys)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := mustSet(t, append(DefaultPolicies(), allPolicies()...), WithMaxKeys(200))
	s.Observe(chat.Event{TS: at(0), Room: "r0", User: "u0", Text: "hi"})
	saved := s.AppendState(nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for i := range 3000 {
				now := at(int64(i) * 10)
				room, user := fmt.Sprint("r", r.IntN(20)), fmt.Sprint("u", r.IntN(300))
				switch r.IntN(10) {
				case 0:
					s.Active(now)
				case 1:
					s.Stats()
				case 2:
					switch r.IntN(40) {
					case 0, 1:
						s.Sweep(now)
					case 2:
						s.AppendState(nil)
					case 3:
						s.CopyState().Append(nil)
					case 4:
						if err := s.LoadState(saved); err != nil {
							t.Error(err)
						}
					}
				case 3, 4, 5:
					s.Check(now, room, user, "hi", true)
				case 6:
					evs := make([]chat.Event, r.IntN(2*batchChunk))
					for k := range evs {
						evs[k] = chat.Event{TS: now, Room: fmt.Sprint("r", r.IntN(20)), User: fmt.Sprint("u", r.IntN(300)), Text: "hi"}
					}
					s.ObserveBatch(evs, func(int, Alert) { s.Check(now, room, user, "", false) }, nil)
				default:
					s.Observe(chat.Event{TS: now, Room: room, User: user, Text: "hi"})
				}
			}
		}()
	}
	wg.Wait()
	var decided uint64
	for _, st := range s.Stats() {
		decided += st.Allowed + st.Denied + st.ShadowDenied
		if st.Keys > 200 {
			t.Errorf("%s: %d keys", st.Policy, st.Keys)
		}
	}
	if decided == 0 {
		t.Error("no decisions counted")
	}
}

func TestDecisionCounters(t *testing.T) {
	s := mustSet(t, DefaultPolicies())
	for range 10 {
		s.Observe(chat.Event{TS: at(0), Room: "r", User: "u", Text: "same"})
	}
	s.Check(at(0), "r", "u", "same", true)
	s.Check(at(0), "r", "u", "", false)
	s.Check(at(0), "r", "other", "", false)
	got := map[string][3]uint64{}
	for _, st := range s.Stats() {
		got[st.Policy] = [3]uint64{st.Allowed, st.Denied, st.ShadowDenied}
	}
	want := map[string][3]uint64{"user_room_flood": {1, 2, 0}, "user_flood": {3, 0, 0}, "repeated_text": {0, 0, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counters %v, want %v", got, want)
	}
	labels := s.DecisionLabels()
	if len(labels) != 6 || !slices.Contains(labels, DecisionLabel{"user_flood", ResultDenied}) || !slices.Contains(labels, DecisionLabel{"repeated_text", ResultShadowDenied}) {
		t.Errorf("labels %v", labels)
	}
}

func TestNewSetRejects(t *testing.T) {
	p := DefaultPolicies()
	if _, err := NewSet(append(p, p[0])); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Errorf("duplicate name: %v", err)
	}
	bad := p[0]
	bad.Limit = 0
	if _, err := NewSet([]Policy{bad}); err == nil || !strings.Contains(err.Error(), `policy "user_room_flood": limit:`) {
		t.Errorf("limit 0: %v", err)
	}
}

// The cap evicts a key that at least half the keys tracked were observed
// after, whatever the order of observations (busy keys are not moved in
// the list on every hit: see table.touch).
func TestCapEvictsOnlyOldKeys(t *testing.T) {
	const max, users, events = 64, 200, 20_000
	s := mustSet(t, []Policy{{Name: "fw", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 1_000_000, Window: time.Hour}}, WithMaxKeys(max))
	r := rand.New(rand.NewPCG(3, 4))
	zipf := rand.NewZipf(r, 1.2, 1, users-1)
	last := map[string]int{} // the event each tracked key was last observed at
	var seq []string         // the user of each event
	evicted := 0
	for i := range events {
		u := fmt.Sprint("u", zipf.Uint64())
		s.Observe(chat.Event{TS: at(0), Room: "r", User: u})
		seq = append(seq, u)
		last[u] = i
		for k, j := range last {
			if s.Check(at(0), "r", k, "", false).Decisions[0].Count > 0 {
				continue
			}
			evicted++
			delete(last, k)
			after := map[string]bool{}
			for _, v := range seq[j+1:] {
				after[v] = true
			}
			if len(after) < max/2 {
				t.Fatalf("event %d: %s evicted with %d keys observed since its last, want at least %d", i, k, len(after), max/2)
			}
		}
	}
	if st := s.Stats()[0]; evicted == 0 || st.Evicted != uint64(evicted) || st.Keys != max {
		t.Errorf("%d evictions seen, stats %+v", evicted, st)
	}
}

// The cap evicts the least recently observed key.
func TestCapEvictsLeastRecentlyObserved(t *testing.T) {
	s := mustSet(t, []Policy{{Name: "fw", Scope: ScopeUser, Algorithm: AlgFixedWindow, Limit: 5, Window: time.Hour}}, WithMaxKeys(3))
	for _, u := range []string{"a", "b", "c", "a", "d"} {
		s.Observe(chat.Event{TS: at(0), Room: "r", User: u})
	}
	counts := map[string]int64{}
	for _, u := range []string{"a", "b", "c", "d"} {
		counts[u] = s.Check(at(0), "r", u, "", false).Decisions[0].Count
	}
	if want := map[string]int64{"a": 2, "b": 0, "c": 1, "d": 1}; !reflect.DeepEqual(counts, want) {
		t.Errorf("counts %v, want %v (b evicted)", counts, want)
	}
	if st := s.Stats()[0]; st.Keys != 3 || st.Evicted != 1 || st.Expired != 0 {
		t.Errorf("stats %+v", st)
	}
}
