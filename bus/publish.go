package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/throttle"
)

// DeadLetter republishes a rejected message, its payload unchanged, to
// chatpulse.deadletter.<reason>, with its headers (NATS ones renamed: see
// OriginalHeaderPrefix), what was wrong (Chatpulse-Error) and where it came
// from (Chatpulse-Subject). It does not wait for the ack; a dead letter
// that is not kept is counted in DeadLetterFailed.
func (b *Bus) DeadLetter(m *ingest.Msg, e *ingest.Error) { b.dead.publish(deadLetterMsg(m, e)) }

// Alert publishes a throttle alert (in a group, published again a few
// times over half a minute while the group's alert stream does not take
// it: retryAlert). Every instance reading the same
// stream raises the same alerts, so each carries a Nats-Msg-Id naming the
// crossing: in a group, the group's alert stream keeps one of each and
// republishes it on AlertSubject (GroupAlerts); standalone, it goes to
// AlertSubject at once, where a JetStream stream that captures
// chatpulse.alerts.> keeps one of each. Alerts can come by the thousand a
// second, so the payload and the id are written by hand (appendAlert,
// alertID), not by reflection.
func (b *Bus) Alert(a throttle.Alert) {
	msg := &nats.Msg{
		Subject: AlertSubject,
		Header:  nats.Header{nats.MsgIdHdr: {alertID(a)}},
		Data:    appendAlert(make([]byte, 0, 128), a),
	}
	if as := b.alerts.Load(); as != nil {
		msg.Subject = as.subject
		if _, err := as.js.PublishMsgAsync(msg, jetstream.WithStallWait(alertStallWait)); err != nil {
			go b.retryAlert(as, msg, err)
		}
		return
	}
	if err := b.nc.PublishMsg(msg); err != nil {
		b.log.Warn("alert not published", "err", err)
	}
}

// A Handler answers one request with a value, sent back as JSON, or an
// error. An error that has a method BadRequest() is the requester's fault
// and goes back as a micro error 400 with its message; any other as 500.
type Handler func(request []byte) (any, error)

// Serve registers the chatpulse micro service on the connection: the
// throttle check on chatpulse.throttle.check, answered by check, and each
// view on chatpulse.views.<view>, answered by its handler. Instances share
// requests through the service's queue group.
func (b *Bus) Serve(check Handler, views map[aggregator.View]Handler) (micro.Service, error) {
	svc, err := micro.AddService(b.nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "chat analytics and moderation throttling",
	})
	if err != nil {
		return nil, err
	}
	add := func(endpoint, subject string, h Handler) error {
		if h == nil {
			return fmt.Errorf("no handler for %s", subject)
		}
		return svc.AddEndpoint(endpoint, respond(h), micro.WithEndpointSubject(subject))
	}
	err = add("throttle_check", CheckSubject, check)
	for _, view := range aggregator.Views {
		if err == nil {
			err = add("views_"+string(view), ViewsPrefix+string(view), views[view])
		}
	}
	if err == nil {
		err = b.nc.Flush() // the server has the endpoints before anyone is told chatpulse is ready
	}
	if err != nil {
		svc.Stop()
		return nil, err
	}
	return svc, nil
}

func respond(h Handler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		v, err := h(req.Data())
		var bad interface{ BadRequest() }
		switch {
		case errors.As(err, &bad):
			req.Error("400", err.Error(), nil)
		case err != nil:
			req.Error("500", "internal error", nil)
		default:
			buf := replies.Get().(*bytes.Buffer)
			buf.Reset()
			if err := json.NewEncoder(buf).Encode(v); err != nil {
				req.Error("500", "internal error", nil)
			} else {
				req.Respond(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))) // copied out before it returns
			}
			replies.Put(buf)
		}
	})
}

// replies hold answers while they are sent, so that an answer costs no
// allocation of its size.
var replies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Answer answers every request on subject with what fn returns for its
// payload, on the connection's goroutine for that subscription, until the
// subscription is unsubscribed: how a group's members answer each other.
func (b *Bus) Answer(subject string, fn func(request []byte) []byte) (*nats.Subscription, error) {
	return b.nc.Subscribe(subject, func(m *nats.Msg) { m.Respond(fn(m.Data)) })
}

// Ask sends a request on subject and returns the answer's payload.
func (b *Bus) Ask(ctx context.Context, subject string, request []byte) ([]byte, error) {
	m, err := b.nc.RequestWithContext(ctx, subject, request)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}
