package main

// synapse measures what a message's check costs chatpulse when Synapse
// asks it (docs/api.md, "Asked by Synapse"), beside the consuming check a
// chat server asks, on chatpulse processes of one kind (the same flags):
// consuming checks per second over keep-alive connections in a closed
// loop, and the CPU time of the chatpulse process per check, read from
// /proc. An allowed Synapse check also files the event on the chat
// stream, which chatpulse then reads back into its views; the plain check
// does neither. So a third kind of run asks the plain check and then
// posts the event on the stream itself, as a chat server that asks before
// it posts does: chatpulse reads it back as it does a filed one, and what
// is left between that run and Synapse's is chatpulse's own publishing
// and the Matrix body.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
)

// synapseToken is every chatpulse's bearer token here: Synapse's module
// sends it as its authorization, a chat server as its token.
const synapseToken = "chatbench-synapse"

// The headers of each asker. synapse-http-antispam posts with Synapse's
// SimpleHttpClient.post_json_get_json, which adds Accept and its
// User-Agent to the module's Authorization.
var (
	serverHeader  = http.Header{"Authorization": {"Bearer " + synapseToken}}
	synapseHeader = http.Header{"Authorization": {"Bearer " + synapseToken}, "Accept": {"application/json"}, "User-Agent": {"Synapse/1.136.0"}}
)

// chatMessage is one message asked about, in both askers' names.
type chatMessage struct {
	room, user, id, text string
	ts                   int64
}

// newMessage is the i'th message: 50,000 users in turn, each always in
// the same one of 100 rooms, so that no key comes near the default
// policies' limits at any rate this machine reaches (every check is
// allowed, and every Synapse check files its event); its id is an event
// id as Matrix makes them, "$" and 43 characters of unpadded base64url.
func newMessage(i int64) chatMessage {
	sum := sha256.Sum256(binary.AppendVarint(nil, i))
	return chatMessage{
		room: fmt.Sprintf("!room-%d:chatbench", i%100), user: fmt.Sprintf("@user-%d:chatbench", i%50_000),
		id: "$" + base64.RawURLEncoding.EncodeToString(sum[:]), text: fmt.Sprint("message ", i), ts: time.Now().UnixMilli(),
	}
}

// checkBody is m's consuming check, as a chat server asks it.
func (m chatMessage) checkBody() []byte {
	return fmt.Appendf(nil, `{"room":%q,"user":%q,"text":%q,"consume":true,"id":%q}`, m.room, m.user, m.text, m.id)
}

// synapseBody is check_event_for_spam of m as synapse-http-antispam v0.5
// sends it: {"event": format_event_for_client_v2(event.get_dict())} with
// event_id set, in Synapse's canonical JSON (keys sorted, no spaces).
// format_event_for_client_v2 drops auth_events, prev_events, hashes,
// signatures, depth, origin and prev_state; what stays of a local text
// message is below.
func (m chatMessage) synapseBody() []byte {
	return fmt.Appendf(nil, `{"event":{"content":{"body":%q,"msgtype":"m.text"},"event_id":%q,"origin_server_ts":%d,"room_id":%q,"sender":%q,"type":"m.room.message","unsigned":{"age_ts":%d}}}`,
		m.text, m.id, m.ts, m.room, m.user, m.ts)
}

// posted is m as a chat server posts it once allowed: on
// chat.<room>.<user>, in chatpulse's form, with Nats-Msg-Id its id.
func (m chatMessage) posted() *nats.Msg {
	ev := ingest.Event{Event: chat.Event{Room: m.room, User: m.user, TS: m.ts, Text: m.text, ID: m.id}, HasText: true, Counted: true}
	return &nats.Msg{
		Subject: "chat." + chat.Token(m.room) + "." + chat.Token(m.user),
		Data:    ingest.AppendNative(nil, ev),
		Header:  nats.Header{nats.MsgIdHdr: {m.id}},
	}
}

// asking is one way of asking chatpulse about a message.
type asking struct {
	name, includes string
	streamed       bool // the message reaches the chat stream, and chatpulse reads it back
	ask            func(c *http.Client, base string, m chatMessage) error
}

// synRun is one run of one asking, on a fresh chatpulse.
type synRun struct {
	rate, cpu float64 // checks per second; chatpulse's CPU µs per check
}

func synapseCmd(args []string) error {
	fs := flag.NewFlagSet("synapse", flag.ExitOnError)
	workers := fs.Int("workers", 8, "clients, each one keep-alive connection, in a closed loop")
	d := fs.Duration("duration", 10*time.Second, "length of each run, after its warm-up")
	warm := fs.Duration("warm", time.Second, "warm-up of each run, not measured")
	rounds := fs.Int("rounds", 3, "rounds; each runs every asking on a fresh chatpulse, in an order rotated by one")
	bin := fs.String("bin", "", "the chatpulse binary (default: go build ./cmd/chatpulse)")
	fs.Parse(args)

	dir, url, done, err := setUp("synapse", bin)
	if err != nil {
		return err
	}
	defer done()
	nc, js, err := connectJS(url, "chatbench-synapse")
	if err != nil {
		return err
	}
	defer nc.Close()
	flags := []string{"--nats-url", url, "--auth-token", synapseToken, "--metrics-auth=false", "--snapshot-interval", "0"}

	check := func(c *http.Client, base string, m chatMessage) error {
		return postWith(c, base+"/api/v1/throttle/check", m.checkBody(), serverHeader)
	}
	askings := []asking{
		{"check, consuming", "the request, the consuming check, the answer; nothing reaches the stream", false, check},
		{"check, then posted", "the same, then the client posts the message on the stream (JetStream, acked) and chatpulse reads it into its views; checks/s also waits for the post", true,
			func(c *http.Client, base string, m chatMessage) error {
				if err := check(c, base, m); err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := js.PublishMsg(ctx, m.posted())
				return err
			}},
		{"Synapse check_event_for_spam", "the Matrix body, the consuming check, the filing (chatpulse publishes the event on JetStream and waits for the ack), the answer, and reading the filed event into its views", true,
			func(c *http.Client, base string, m chatMessage) error {
				return postWith(c, base+"/api/v1/matrix/antispam/check_event_for_spam", m.synapseBody(), synapseHeader)
			}},
	}
	fmt.Printf("chatpulse %s, default policies; 50,000 users in 100 rooms, each check allowed; %d clients, each one keep-alive connection, in a closed loop; %v a run after %v of warm-up, each on a fresh chatpulse, in an order rotated by one each round\n\n",
		strings.Join(flags[2:], " "), *workers, *d, *warm)

	var next atomic.Int64 // the messages, over every run: ids never repeat
	results := make([][]synRun, len(askings))
	for round := range max(*rounds, 1) {
		for _, k := range rotated(len(askings), round) {
			a := askings[k]
			r, err := runAsking(*bin, dir, flags, js, a, *workers, *warm, *d, &next)
			if err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
			fmt.Printf("round %d  %-30s %7.0f checks/s on %.2f cores of chatpulse: %6.1f µs CPU a check\n", round+1, a.name, r.rate, r.rate*r.cpu/1e6, r.cpu)
			results[k] = append(results[k], r)
		}
	}

	// Ratios and differences are taken within each round, then their
	// median: the machine's load changes less within a round than across.
	const plain, posted, syn = 0, 1, 2
	cpu := func(k, i int) float64 { return results[k][i].cpu }
	perRound := func(f func(i int) float64) []float64 {
		out := make([]float64, len(results[0]))
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	value := func(v float64) float64 { return v }
	fmt.Printf("\n| | checks/s | chatpulse CPU per check | checks per CPU-second of chatpulse | CPU per check over the plain check's |\n|---|---|---|---|---|\n")
	for k, a := range askings {
		ratio := "(the baseline)"
		if k != plain {
			ratio = spread(perRound(func(i int) float64 { return cpu(k, i) / cpu(plain, i) }), value, "%.2fx")
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", a.name,
			spread(results[k], func(r synRun) float64 { return r.rate }, "%.0f"),
			spread(results[k], func(r synRun) float64 { return r.cpu }, "%.1f µs"),
			spread(results[k], func(r synRun) float64 { return 1e6 / r.cpu }, "%.0f"),
			ratio)
	}
	fmt.Printf("(medians of %d rounds, and their range)\n\n", len(results[0]))
	fmt.Printf("a Synapse check over a check then posted: %s the CPU\n",
		spread(perRound(func(i int) float64 { return cpu(syn, i) / cpu(posted, i) }), value, "%.2fx"))
	fmt.Printf("what the filing adds to a Synapse check, all told (Synapse - check): %s, %s of its CPU\n",
		spread(perRound(func(i int) float64 { return cpu(syn, i) - cpu(plain, i) }), value, "%.1f µs"),
		spread(perRound(func(i int) float64 { return 100 * (cpu(syn, i) - cpu(plain, i)) / cpu(syn, i) }), value, "%.0f%%"))
	fmt.Printf("  of which reading the event into the views (posted - check): %s\n",
		spread(perRound(func(i int) float64 { return cpu(posted, i) - cpu(plain, i) }), value, "%.1f µs"))
	fmt.Printf("  and chatpulse's publishing and its ack, with the longer Matrix body (Synapse - posted): %s\n\n",
		spread(perRound(func(i int) float64 { return cpu(syn, i) - cpu(posted, i) }), value, "%.1f µs"))
	fmt.Println("each figure is the chatpulse process's CPU (all its threads) over a run and until its views counted every message that reached the stream, per check:")
	for _, a := range askings {
		fmt.Printf("  %s: %s\n", a.name, a.includes)
	}
	return nil
}

// runAsking starts a chatpulse with flags, asks it a's way in a closed
// loop for warm and then d, and returns the checks per second and the
// chatpulse's CPU per check over d, the reading back of what reached the
// stream included. It stops the chatpulse and deletes every stream, so
// that the next run starts from nothing.
func runAsking(bin, dir string, flags []string, js jetstream.JetStream, a asking, workers int, warm, d time.Duration, next *atomic.Int64) (r synRun, err error) {
	cp, err := startChatpulse(bin, dir, flags...)
	if err != nil {
		return synRun{}, err
	}
	defer func() {
		cp.stop()
		if derr := deleteStreams(js); err == nil {
			err = derr
		}
	}()
	call := func(c *http.Client) error { return a.ask(c, cp.url, newMessage(next.Add(1))) }
	streamed := 0
	// measured is the CPU and checks of one closed loop of length l, and
	// of reading back what it streamed.
	measured := func(l time.Duration) (float64, int, error) {
		cpu0, err := cp.cpu()
		if err != nil {
			return 0, 0, err
		}
		lat, _, err := closedLoop(workers, l, nil, call)
		if err != nil {
			return 0, 0, err
		}
		if a.streamed {
			streamed += len(lat)
		}
		if err := received(cp, streamed, time.Minute); err != nil {
			return 0, 0, err
		}
		cpu1, err := cp.cpu()
		return cpu1 - cpu0, len(lat), err
	}
	if _, _, err := measured(warm); err != nil {
		return synRun{}, err
	}
	cpu, n, err := measured(d)
	if err != nil {
		return synRun{}, err
	}
	if err := allAllowed(cp); err != nil {
		return synRun{}, err
	}
	return synRun{rate: float64(n) / d.Seconds(), cpu: cpu / float64(n) * 1e6}, nil
}

// received waits, for d at most, until p has received n messages from
// its stream.
func received(p *process, n int, d time.Duration) error {
	var got float64
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m, err := scrape(p.url + "/metrics")
		if err != nil {
			return err
		}
		if got = m["chatpulse_events_received_total"]; got >= float64(n) {
			return nil
		}
	}
	return fmt.Errorf("chatpulse received %.0f of the %d messages on its stream in %v", got, n, d)
}

// allAllowed says why not every check of cp's was allowed and filed.
func allAllowed(cp *process) error {
	m, err := scrape(cp.url + "/metrics")
	if err != nil {
		return err
	}
	decided := false
	for k, v := range m {
		if !strings.HasPrefix(k, "chatpulse_throttle_decisions_total{") {
			continue
		}
		decided = true
		if strings.Contains(k, `result="denied"`) && v > 0 {
			return fmt.Errorf("%.0f checks denied (%s): the keys are too hot for the rate", v, k)
		}
	}
	if !decided {
		return fmt.Errorf("no chatpulse_throttle_decisions_total on /metrics: cannot tell whether every check was allowed")
	}
	if v := m["chatpulse_synapse_unfiled_total"]; v > 0 {
		return fmt.Errorf("%.0f allowed events not filed", v)
	}
	return nil
}

// deleteStreams deletes every stream of js's account.
func deleteStreams(js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var all []string
	for name := range names.Name() {
		all = append(all, name)
	}
	if err := names.Err(); err != nil {
		return err
	}
	for _, name := range all {
		if err := js.DeleteStream(ctx, name); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	return nil
}
