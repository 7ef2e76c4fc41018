package bus

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/ingest"
)

// FileOne files an event in chatpulse's own form on <prefix><room>.<user>,
// marked Chatpulse-Filed and with its Nats-Msg-Id: with JetStream once the
// chat stream has it (the same id again is taken, and stored once), and
// refused where no stream captures the subject; without, as a plain
// publish that a subscription hears.
func TestFileOne(t *testing.T) {
	ev := ingest.Event{Event: chat.Event{Room: "a.b", User: "@u:hs", TS: 1_796_000_000_000, ID: "$e1", Text: "hi"}, HasText: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	b := openTest(t, true)
	if err := b.EnsureStreams(ctx, StreamConfig{Stream: "CHAT", Subject: "chat.>", MaxAge: time.Hour}, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.FileOne(ctx, FiledMsg("chat.", ev, ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	first, last, err := b.Seqs(ctx, "CHAT")
	if err != nil || first != 1 || last != 1 {
		t.Fatalf("the stream holds %d..%d (%v), want the event once", first, last, err)
	}
	m, err := b.Original(ctx, "CHAT", 1)
	if err != nil {
		t.Fatal(err)
	}
	got, derr := ingest.Matrix().Filed().Decode(m.Data, ev.TS, 0)
	if m.Subject != "chat.a%2Eb.@u:hs" || m.Header[ingest.FiledHeader] == nil || m.Header["Nats-Msg-Id"][0] != "$e1" || derr != nil || !reflect.DeepEqual(got.Event, ev.Event) {
		t.Errorf("filed %s %v %s: %+v %v", m.Subject, m.Header, m.Data, got, derr)
	}
	if err := b.FileOne(ctx, FiledMsg("other.", ev, "$e2")); err == nil || !strings.Contains(err.Error(), "other.a%2Eb.@u:hs") {
		t.Errorf("filed where no stream captures it: %v, want an error naming the subject", err)
	}

	core := openTest(t, false)
	src, err := core.Subscribe("chat.>", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.FileOne(ctx, FiledMsg("chat.", ev, ev.ID)); err != nil {
		t.Fatal(err)
	}
	buf, _ := src.Next(make([]ingest.Msg, 0, 4))
	if len(buf) != 1 || buf[0].Header[ingest.FiledHeader] == nil {
		t.Errorf("without JetStream, heard %+v", buf)
	}
	src.Stop()
}
