package act

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/matrix"
	"github.com/chatpulse/chatpulse/throttle"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The tests here run the Actor against a small homeserver of the Matrix
// shape, for the faults a real one will not make on demand: 429s, 5xx,
// a homeserver that holds a change until the test lets it go. What the
// acts do to a room is tested against Dendrite (dendrite_test.go).

// shape is the fake homeserver: one room, whose power levels and join
// rules it keeps, and a hook that may answer a request first.
type shape struct {
	*httptest.Server
	mu       sync.Mutex
	levels   string // the power levels' content
	fault    func(r *http.Request) (status int, body string, ok bool)
	requests []string // "METHOD path", in order
	times    []time.Time
}

func newShape(t *testing.T) *shape {
	s := &shape{levels: `{"users":{"@bot:x":100},"events_default":0,"redact":50,"state_default":50}`}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		s.times = append(s.times, time.Now())
		fault := s.fault
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if fault != nil {
			if status, b, ok := fault(r); ok {
				w.WriteHeader(status)
				io.WriteString(w, b)
				return
			}
		}
		switch p := r.URL.Path; {
		case strings.HasSuffix(p, "/account/whoami"):
			io.WriteString(w, `{"user_id":"@bot:x"}`)
		case strings.Contains(p, "/state/m.room.power_levels") && r.Method == http.MethodGet:
			s.mu.Lock()
			io.WriteString(w, s.levels)
			s.mu.Unlock()
		case strings.Contains(p, "/state/m.room.power_levels"):
			s.mu.Lock()
			s.levels = string(body)
			s.mu.Unlock()
			io.WriteString(w, `{"event_id":"$levels"}`)
		case strings.Contains(p, "/redact/"):
			io.WriteString(w, `{"event_id":"$redaction"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"errcode":"M_NOT_FOUND","error":"not here"}`)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *shape) setFault(f func(r *http.Request) (int, string, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// writes are the requests that changed something, in order.
func (s *shape) writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.requests {
		if strings.HasPrefix(r, "PUT ") {
			out = append(out, r)
		}
	}
	return out
}

// acts collects what an Actor publishes.
type acts struct {
	mu  sync.Mutex
	all []Act
}

func (p *acts) publish(_ context.Context, _, _ string, data []byte) error {
	var a Act
	if err := json.Unmarshal(data, &a); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.all = append(p.all, a)
	return nil
}

func (p *acts) of(k Kind) []Act {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Act
	for _, a := range p.all {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

// actorOn is an Actor acting on the homeserver at url, with a queue of
// size (0: the default), running until the test ends.
func actorOn(t *testing.T, url string, size int, p *acts) *Actor {
	t.Helper()
	c, err := matrix.NewClient(url, func() string { return "secret" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Queue: size, Homeserver: c, Publish: p.publish, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// flood is a message over user_room_flood, which mutes and redacts.
func flood(user, event string, first bool) throttle.Over {
	now := time.Now().UnixMilli()
	return throttle.Over{Policy: "user_room_flood", Acts: []throttle.ActKind{throttle.ActMute, throttle.ActRedact}, Room: "!r:x", User: user,
		First: first, Event: event, EventRoom: "!r:x", EventUser: user, At: now, Denied: now + time.Hour.Milliseconds(), Window: 10 * time.Second}
}

// A 429 is waited out, for as long as it asks, and the change made again;
// a 5xx is tried again, with backoff; then the act is done once.
func TestActWaitsOutTheHomeserver(t *testing.T) {
	s := newShape(t)
	var n int
	s.setFault(func(r *http.Request) (int, string, bool) {
		if r.Method != http.MethodPut {
			return 0, "", false
		}
		n++
		switch n {
		case 1:
			return http.StatusTooManyRequests, `{"errcode":"M_LIMIT_EXCEEDED","error":"slow down","retry_after_ms":400}`, true
		case 2, 3:
			return http.StatusBadGateway, `{"errcode":"M_UNKNOWN","error":"upstream"}`, true
		}
		return 0, "", false
	})
	p := &acts{}
	a := actorOn(t, s.URL, 0, p)
	a.Over("", flood("@alice:x", "$m1", true))
	wait.For(t, 10*time.Second, func() error {
		if m, r := p.of(Mute), p.of(Redact); len(m) != 1 || m[0].Event != "$levels" || len(r) != 1 || r[0].Event != "$redaction" {
			return fmt.Errorf("published mutes %+v, redactions %+v", m, r)
		}
		return nil
	})
	w := s.writes()
	if len(w) != 5 { // the mute 4 times, then the redaction
		t.Fatalf("writes %v; want the mute tried 4 times, then the redaction", w)
	}
	s.mu.Lock()
	var puts []time.Time
	for i, r := range s.requests {
		if strings.HasPrefix(r, "PUT ") {
			puts = append(puts, s.times[i])
		}
	}
	s.mu.Unlock()
	if d := puts[1].Sub(puts[0]); d < 400*time.Millisecond {
		t.Errorf("tried again %v after a 429 that asked for 400ms", d)
	}
	if got := testCounter(a, Mute, "done"); got != 1 {
		t.Errorf("mutes done: %v", got)
	}
	var levels struct{ Users map[string]int }
	s.mu.Lock()
	json.Unmarshal([]byte(s.levels), &levels)
	s.mu.Unlock()
	if levels.Users["@alice:x"] != -1 {
		t.Errorf("alice's level %d, want -1 (below events_default 0)", levels.Users["@alice:x"])
	}
}

// A full queue drops redactions first, the newest first, and refuses a
// redaction rather than a mute; mutes go ahead of redactions.
func TestActQueueDropsRedactionsFirst(t *testing.T) {
	s := newShape(t)
	release := make(chan struct{})
	var held sync.Once
	s.setFault(func(r *http.Request) (int, string, bool) {
		if r.Method == http.MethodPut {
			held.Do(func() { <-release }) // the first change waits: the queue fills
		}
		return 0, "", false
	})
	p := &acts{}
	a := actorOn(t, s.URL, 3, p)
	a.Over("", flood("@u0:x", "", true)) // a mute (no event to redact), held at the homeserver
	wait.For(t, 10*time.Second, func() error {
		if w := s.writes(); len(w) != 1 {
			return fmt.Errorf("writes %v", w)
		}
		return nil
	})
	redacts := func(events ...string) {
		for _, e := range events {
			o := flood("@spammer:x", e, false)
			o.Acts = []throttle.ActKind{throttle.ActRedact}
			a.Over("", o)
		}
	}
	redacts("$r1", "$r2")                // queue: r1 r2
	a.Over("", flood("@u1:x", "", true)) // queue: r1 r2 u1
	a.Over("", flood("@u2:x", "", true)) // full: r2 goes; queue: r1 u1 u2
	redacts("$r3")                       // full: refused
	if n, dropped := a.q.waiting(); n != 3 || dropped[Redact] != 2 || dropped[Mute] != 0 {
		t.Fatalf("waiting %d, dropped %v; want 3 waiting, 2 redactions dropped", n, dropped)
	}
	if got := testCounter(a, Redact, "dropped"); got != 2 {
		t.Errorf("chatpulse_acts_total{kind=redact,result=dropped} = %v, want 2", got)
	}
	close(release)
	wait.For(t, 10*time.Second, func() error {
		if len(p.of(Redact)) != 1 || len(p.of(Mute)) != 3 {
			return fmt.Errorf("published %d mutes, %d redactions", len(p.of(Mute)), len(p.of(Redact)))
		}
		return nil
	})
	var order []string
	for _, w := range s.writes() {
		order = append(order, w[strings.LastIndex(w, "/")+1:])
	}
	if !slices.Equal(order[:3], []string{"", "", ""}) || !strings.HasPrefix(order[3], "chatpulse-") {
		t.Errorf("changes in order %q: want the three mutes (power levels, state key \"\") before the redaction", order)
	}
	if st := a.Status(); st.Dropped != 2 || st.Queue != 0 {
		t.Errorf("status: %+v", st)
	}
}

// A room where the bot lacks the power is noted, listed, and not asked
// again for every message: the jobs that need the power fail at once.
func TestActWithoutPower(t *testing.T) {
	s := newShape(t)
	s.mu.Lock()
	s.levels = `{"users":{"@bot:x":0},"events_default":0,"redact":50,"state_default":50}`
	s.mu.Unlock()
	p := &acts{}
	a := actorOn(t, s.URL, 0, p)
	a.Over("", flood("@alice:x", "$m1", true))
	a.Over("", flood("@alice:x", "$m2", false))
	wait.For(t, 10*time.Second, func() error {
		if n := testCounter(a, Mute, "skipped") + testCounter(a, Redact, "skipped"); n < 3 {
			return fmt.Errorf("%v skipped", n)
		}
		return nil
	})
	st := a.Status()
	if len(st.Rooms) != 1 || st.Rooms[0].CanAct || !slices.Equal(st.Rooms[0].Missing, []string{"redact", "m.room.power_levels", "m.room.join_rules"}) {
		t.Errorf("rooms: %+v", st.Rooms)
	}
	if w := s.writes(); len(w) != 0 {
		t.Errorf("changes tried without power: %v", w)
	}
	s.mu.Lock()
	reads := 0
	for _, r := range s.requests {
		if strings.Contains(r, "power_levels") {
			reads++
		}
	}
	s.mu.Unlock()
	if reads != 1 {
		t.Errorf("power levels read %d times; want once, then the lack noted", reads)
	}
}

// testCounter is chatpulse_acts_total{kind,result} of a.
func testCounter(a *Actor, k Kind, result string) float64 {
	return testutil.ToFloat64(a.m.acts.WithLabelValues(string(k), result))
}
