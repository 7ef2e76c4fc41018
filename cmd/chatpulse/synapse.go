package main

import (
	"context"
	"strings"

	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/ingest"
)

// file files an event Synapse's checks allowed on the chat stream, as if
// it had arrived on the bus (docs/contract.md section 14): on --subject's
// <room>.<user>, in chatpulse's own form, with Nats-Msg-Id its id.
func (m *Main) file(ctx context.Context, ev ingest.Event) error {
	return m.bus.FileOne(ctx, bus.FiledMsg(filePrefix(m.Config.Subject), ev, ev.ID))
}

// filePrefix is where filed events go: before <room>.<user>, the prefix
// of --subject when it is of that form (chat.> files on chat.), and
// chat. otherwise (a --source-stream's >, or a subject of one token: a
// stream that captures no chat.<room>.<user> of its own refuses them,
// and each is logged and counted).
func filePrefix(subject string) string {
	if p, ok := strings.CutSuffix(subject, ">"); ok && strings.HasSuffix(p, ".") && !strings.Contains(p, "*") {
		return p
	}
	return "chat."
}
