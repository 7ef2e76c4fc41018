package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/aggregator/oracle"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/internal/wait"
	"github.com/chatpulse/chatpulse/rolling"
)

// matrixTraffic makes Matrix envelopes as Dendrite publishes them: the
// samples of ingest/testdata/matrix (edits, redactions, reactions,
// invites, a display-name change... as well as messages, joins and
// leaves), and messages, joins and leaves of several rooms and users;
// each at a ts of its own in the 50 s before now.
type matrixTraffic struct {
	r       *rand.Rand
	now     int64
	samples [][]byte
	n       int
}

var tsField = regexp.MustCompile(`"origin_server_ts":[0-9]+`)

func newMatrixTraffic(t *testing.T, seed uint64, now int64) *matrixTraffic {
	files, _ := filepath.Glob("../../ingest/testdata/matrix/*.payload.json")
	mt := &matrixTraffic{r: rand.New(rand.NewPCG(seed, 5)), now: now}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		mt.samples = append(mt.samples, data)
	}
	if len(mt.samples) < 10 {
		t.Fatalf("%d Matrix samples", len(mt.samples))
	}
	return mt
}

// next is the next envelope.
func (mt *matrixTraffic) next() []byte {
	mt.n++
	ts := mt.now - mt.r.Int64N(50_000)
	if mt.r.IntN(3) == 0 {
		s := mt.samples[mt.r.IntN(len(mt.samples))]
		return tsField.ReplaceAll(s, fmt.Appendf(nil, `"origin_server_ts":%d`, ts))
	}
	rooms := []string{"!3rYnfsG2FsJdpctO:localhost", "!side.room:matrix.example.org", "!a%b:localhost", "!d*e>f:localhost"}
	users := []string{"@alice:localhost", "@bob.smith:matrix.example.org", "@carol:localhost", "@dave_99:localhost", "@eve:x.y"}
	kind := []string{"message", "message", "message", "join", "leave"}[mt.r.IntN(5)]
	return []byte(foreignEvent(kind, rooms[mt.r.IntN(len(rooms))], users[mt.r.IntN(len(users))], ts, mt.n))
}

// A group on a foreign bus (docs/contract.md section 13): three members
// read Matrix envelopes of one subject through --source-stream, beside a
// standalone instance reading the same. The member that files them is
// killed (SIGKILL) while they flow, and the next one is closed while they
// flow: the group's chat stream ends up with each event that is to be
// filed once (none dropped, none doubled), and the group's views equal
// the standalone instance's, and the oracle's.
func TestGroupForeignBus(t *testing.T) {
	url, js := chatSystem(t)
	ctx := context.Background()
	clock := newFrozen()
	alone := startMainAt(t, clock.Now, "--nats-url", url, "--input", "matrix", "--source-stream", "Foreign", "--stream", "CHAT_ALONE")
	// With m0, m1 and m2 live, rendezvous gives the filing (owner.8)
	// to m2, then to m1, then to m0.
	args := []string{"--nats-url", url, "--group", "g", "--partitions", "8", "--input", "matrix", "--source-stream", "Foreign"}
	m0 := startMainAt(t, clock.Now, append(args, "--instance", "m0")...)
	m1 := startMainAt(t, clock.Now, append(args, "--instance", "m1")...)
	victim, _ := startBinary(t, append(args, "--instance", "m2")...)
	waitFiler := func(tm *testMain, members int, want string) {
		t.Helper()
		wait.For(t, 30*time.Second, func() error {
			var st struct {
				groupStatus
				Filer *string `json:"filer"`
			}
			tm.get("/api/v1/group", &st)
			if !st.Complete || len(st.Members) != members || st.Filer == nil || *st.Filer != want {
				return fmt.Errorf("%d members, complete %v, filer %v; want %d, complete, filer %s", len(st.Members), st.Complete, st.Filer, members, want)
			}
			return nil
		})
	}
	waitFiler(m0, 3, "m2")
	waitSources(t, js, 2)

	now := clock.ms.Load()
	traffic := newMatrixTraffic(t, 11, now)
	var evs []chat.Event // the messages, to count
	toFile := 0          // the messages, joins and leaves, to file
	publish := func(n int) {
		for range n {
			msg := nats.NewMsg("Foreign")
			msg.Data = traffic.next()
			msg.Header.Set("output_room_event_type", "new_room_event")
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				t.Error(err)
				return
			}
			ev, err := ingest.Matrix().Decode(msg.Data, time.Now().UnixMilli(), 5000)
			if err != nil || !ev.Counted {
				continue
			}
			toFile++
			evs = append(evs, chat.Event{Room: strings.Clone(ev.Room), User: strings.Clone(ev.User), TS: ev.TS, Kind: ev.Kind})
		}
	}
	// filed is how many events the group's chat stream holds.
	filed := func() uint64 {
		s, err := js.Stream(ctx, "CHAT")
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.Msgs
	}
	// midway publishes n events, and stop() once some of them are filed
	// and while the others are still to come.
	midway := func(n int, stop func()) {
		t.Helper()
		before := filed()
		done := make(chan struct{})
		go func() { defer close(done); publish(n) }()
		wait.For(t, 30*time.Second, func() error {
			if got := filed(); got < before+20 {
				return fmt.Errorf("%d filed of the %d published since", got-before, n)
			}
			return nil
		})
		stop()
		<-done
	}
	publish(200)
	midway(600, func() {
		if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		victim.Wait()
	})
	waitFiler(m0, 2, "m1")
	midway(600, func() { m1.Close() })
	waitFiler(m0, 1, "m0")
	publish(100)
	// One that does not map is dead-lettered by the filer, and not filed.
	bad := nats.NewMsg("Foreign")
	bad.Data = []byte(strings.Replace(foreignEvent("message", "!r:localhost", "@u:localhost", now, 9999), `"room_id"`, `"room"`, 1))
	if _, err := js.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		if got := m0.metric(`chatpulse_events_rejected_total{reason="unmapped"}`); got != 1 {
			return fmt.Errorf("m0 rejected %v events as unmapped, want 1", got)
		}
		return nil
	})
	t.Logf("%d envelopes published, %d to be filed, %d of them counted", traffic.n, toFile, len(evs))

	wait.For(t, 30*time.Second, func() error {
		if got := filed(); got != uint64(toFile) {
			return fmt.Errorf("the group's chat stream holds %d events; %d were to be filed", got, toFile)
		}
		return nil
	})
	// Each exactly once: the events filed are named by their sequences
	// in the copy, all different.
	cons, err := js.OrderedConsumer(ctx, "CHAT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for range toFile {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		id := m.Headers().Get(nats.MsgIdHdr)
		if !strings.HasPrefix(id, "CHAT_SOURCE:") || ids[id] {
			t.Fatalf("filed event %q: Nats-Msg-Id %q (again?)", m.Data(), id)
		}
		ids[id] = true
	}

	ws, _ := rolling.ParseWindows(rolling.DefaultWindows)
	o := oracle.New(ws)
	o.Observe(now, evs)
	alone.compareAll(o, now, evs)
	m0.compareGroup(o, evs)
	// And the group's answers are the standalone instance's, byte for
	// byte but for complete and missing_partitions.
	for _, path := range []string{"/api/v1/overview?k=100&window=5m", "/api/v1/rooms?limit=100&window=1h", "/api/v1/rooms/" + strings.ReplaceAll("!d*e>f:localhost", "!", "%21") + "?window=1m", "/api/v1/users/%40eve:x.y?window=5m"} {
		var want map[string]any
		alone.get(path, &want)
		if ok, diff := m0.sameGroupJSON(path, func(int64) any { return want }); !ok {
			t.Errorf("GET %s: the group's and the standalone instance's differ:\n%s", path, diff)
		}
	}
	// m1 stopped cleanly: it finished the batch it was filing and said
	// so, and m0 filed none of it again.
	if again, filed := m0.metric("chatpulse_events_filed_again_total"), m0.metric("chatpulse_events_filed_total"); again != 0 || filed <= 0 {
		t.Errorf("m0 filed %v events, and %v again; want some, and none again", filed, again)
	}
	if got := m0.metric("chatpulse_group_partitions_owned"); got != 8 {
		t.Errorf("chatpulse_group_partitions_owned = %v, want 8 (the filing is no partition)", got)
	}
}
