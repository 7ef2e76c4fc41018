package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/internal/natstest"
	"github.com/chatpulse/chatpulse/internal/wait"
)

// A publisher's JetStream headers (expected stream, expected last message
// or sequence, message id) are meant for the chat stream. On a dead letter
// they would be applied to CHATPULSE_DEADLETTER, which would refuse or
// de-duplicate it: every one of 90 such dead letters must be kept, with
// the headers still readable under Chatpulse-Original-.
func TestDeadLettersWithJetStreamHeaders(t *testing.T) {
	tm := startMain(t)
	js, err := jetstream.New(tm.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 90
	var lastSeq uint64
	seqs := map[string]uint64{} // X-Trace -> the event's sequence in CHAT
	for i := range n {
		msg := nats.NewMsg(fmt.Sprintf("chat.x.u%d", i%3))
		msg.Data = []byte("not json")
		msg.Header.Set("X-Trace", fmt.Sprint(i))
		// Each expectation holds for CHAT, so the chat stream takes all 90.
		switch i % 3 {
		case 0:
			msg.Header.Set("Nats-Expected-Stream", "CHAT")
		case 1:
			msg.Header.Set("Nats-Expected-Last-Sequence", fmt.Sprint(lastSeq))
		case 2:
			msg.Header.Set("Nats-Expected-Last-Msg-Id", fmt.Sprint("m-", i-1))
		}
		msg.Header.Set("Nats-Msg-Id", fmt.Sprint("m-", i))
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		lastSeq = ack.Sequence
		seqs[fmt.Sprint(i)] = ack.Sequence
	}
	tm.waitReceived(n)
	dlq, err := js.Stream(ctx, "CHATPULSE_DEADLETTER")
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() error {
		info, err := dlq.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != n {
			return fmt.Errorf("%d of %d dead letters in the stream", info.State.Msgs, n)
		}
		return nil
	})
	for seq := uint64(1); seq <= n; seq++ {
		m, err := dlq.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		i := m.Header.Get("X-Trace")
		// The only Nats-Msg-Id is chatpulse's own, naming the event by its
		// sequence in CHAT and its subject.
		own := fmt.Sprintf("%d|%s", seqs[i], m.Header.Get("Chatpulse-Subject"))
		if string(m.Data) != "not json" || m.Header.Get("Chatpulse-Original-Nats-Msg-Id") != "m-"+i ||
			m.Header.Get("Nats-Msg-Id") != own || m.Header.Get("Chatpulse-Error") == "" {
			t.Fatalf("dead letter %d: %q %v", seq, m.Data, m.Header)
		}
	}
	if got := tm.metric("chatpulse_deadletter_failed_total"); got != 0 {
		t.Fatalf("chatpulse_deadletter_failed_total = %v", got)
	}
}

// A dead letter the dead-letter stream refuses is counted, not lost
// silently: with the stream full (at most 10 messages, new ones refused),
// 25 rejected events leave 10 kept and 15 failed.
func TestDeadLetterFailuresCounted(t *testing.T) {
	tm := startMain(t)
	js, err := jetstream.New(tm.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dlq, err := js.Stream(ctx, "CHATPULSE_DEADLETTER")
	if err != nil {
		t.Fatal(err)
	}
	cfg := dlq.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 10, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for range 25 {
		tm.publish("chat.x.y", "not json")
	}
	tm.waitReceived(25)
	wait.For(t, 30*time.Second, func() error {
		if got := tm.metric("chatpulse_deadletter_failed_total"); got != 15 {
			return fmt.Errorf("%v failed dead letters, want 15", got)
		}
		return nil
	})
	info, err := dlq.Info(ctx)
	if err != nil || info.State.Msgs != 10 {
		t.Fatalf("dead-letter stream: %v, %v", info, err)
	}
}

// Without JetStream (--jetstream=false) dead letters are plain publishes;
// a stream that a user keeps on chatpulse.deadletter.> must still get
// every one, even when the publisher reused one Nats-Msg-Id.
func TestCoreDeadLettersKeepHeadersOut(t *testing.T) {
	url := natstest.Start(t).URL()
	tm := startMain(t, "--jetstream=false", "--nats-url", url)
	js, err := jetstream.New(tm.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dlq, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP_DEAD", Subjects: []string{"chatpulse.deadletter.>"}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for range n {
		msg := nats.NewMsg("chat.x.y")
		msg.Data = []byte("not json")
		msg.Header.Set("Nats-Msg-Id", "same")
		msg.Header.Set("Nats-Expected-Stream", "CHAT")
		if err := tm.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	tm.waitReceived(n)
	wait.For(t, 30*time.Second, func() error {
		info, err := dlq.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != n {
			return fmt.Errorf("%d of %d dead letters in the stream", info.State.Msgs, n)
		}
		return nil
	})
}
