package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chatpulse/chatpulse/throttle"
)

// Alerts once per crossing. Every instance that reads the same events
// raises the same alerts, and a group member that takes over a partition
// handles again what its previous holder handled last (up to the last
// progress write, about a second). An alert's Nats-Msg-Id names its
// crossing (alertID); in a group, alerts go to the group's alert stream
// (AlertStream), which keeps one of each id within AlertDuplicates and
// republishes what it keeps on AlertSubject: subscribers of AlertSubject
// hear each crossing once, however many members raised it.
const (
	AlertDuplicates = 2 * time.Minute
	alertMaxAge     = time.Hour
	alertAckWait    = 5 * time.Second
	alertStallWait  = 5 * time.Second
	alertWindow     = 1024 // alerts awaiting their acks at once
)

// AlertStream is the group's alert stream, AlertIntake the subject it
// captures (members publish there, never on AlertSubject).
func AlertStream(group string) string { return "CHATPULSE_GROUP_" + group + "_ALERTS" }
func AlertIntake(group string) string { return OwnPrefix + "group." + group + ".alerts.throttle" }

// alertStream is where Alert publishes when a group's stream takes the
// alerts: subject, with acks awaited asynchronously.
type alertStream struct {
	js      jetstream.JetStream
	subject string
	failed  atomic.Uint64
	logged  logEvery
}

// GroupAlerts makes group's alert stream, if it is missing, and has
// Alert publish there from now on (call it before the first alert).
func (b *Bus) GroupAlerts(ctx context.Context, group string, replicas int) error {
	if b.js == nil {
		return fmt.Errorf("group %s: alerts: needs JetStream", group)
	}
	name, intake := AlertStream(group), AlertIntake(group)
	cfg := jetstream.StreamConfig{
		Name: name, Description: "chatpulse group " + group + ": one of each alert, republished on " + AlertSubject,
		Subjects: []string{intake}, Duplicates: AlertDuplicates, MaxAge: alertMaxAge,
		RePublish: &jetstream.RePublish{Source: intake, Destination: AlertSubject},
		Storage:   jetstream.FileStorage, Discard: jetstream.DiscardOld, Replicas: max(replicas, 1),
	}
	if _, err := b.js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	as := &alertStream{subject: intake}
	js, err := jetstream.New(b.nc,
		jetstream.WithPublishAsyncMaxPending(alertWindow),
		jetstream.WithPublishAsyncTimeout(alertAckWait),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { go b.retryAlert(as, m, err) }))
	if err != nil {
		return fmt.Errorf("stream %s: %w", name, err)
	}
	as.js = js
	b.alerts.Store(as)
	return nil
}

// AlertFailed is the number of alerts a group's alert stream did not take:
// not sent, or not acked in time, however often published again
// (retryAlert). A duplicate is taken (and dropped).
func (b *Bus) AlertFailed() uint64 {
	if as := b.alerts.Load(); as != nil {
		return as.failed.Load()
	}
	return 0
}

// alertRetries are the pauses before each publish again of an alert the
// group's alert stream did not take: a stream without a leader (a NATS
// node lost) has one again within seconds. They add up to well within
// AlertDuplicates, so that the stream keeps one of each still if an
// earlier publish got through after all.
var alertRetries = []time.Duration{250 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// retryAlert publishes msg again, waiting for each ack, until the stream
// takes it or alertRetries run out: then it counts it failed.
func (b *Bus) retryAlert(as *alertStream, msg *nats.Msg, err error) {
	for _, d := range alertRetries {
		time.Sleep(d)
		ctx, cancel := context.WithTimeout(context.Background(), alertAckWait)
		_, err = as.js.PublishMsg(ctx, &nats.Msg{Subject: msg.Subject, Header: msg.Header, Data: msg.Data})
		cancel()
		if err == nil || b.nc.IsClosed() {
			break
		}
	}
	if err != nil {
		b.alertFailed(as, err)
	}
}

func (b *Bus) alertFailed(as *alertStream, err error) {
	total := as.failed.Add(1)
	if as.logged.due(10 * time.Second) {
		b.log.Warn("alert not kept", "subject", as.subject, "err", err, "failed_total", total)
	}
}

// flushAlerts waits, a bounded time, for the acks of the alerts still
// outstanding.
func (b *Bus) flushAlerts() {
	as := b.alerts.Load()
	if as == nil {
		return
	}
	select {
	case <-as.js.PublishAsyncComplete():
	case <-time.After(alertAckWait + time.Second):
	}
}

// SubscribeAlerts calls fn with every throttle alert published on NATS:
// in a group, how a member's dashboards hear of the crossings that the
// owners of other partitions see.
func (b *Bus) SubscribeAlerts(fn func(throttle.Alert)) (*nats.Subscription, error) {
	return b.nc.Subscribe(AlertSubject, func(m *nats.Msg) {
		var a throttle.Alert
		if err := json.Unmarshal(m.Data, &a); err != nil {
			b.log.Warn("alert not understood", "err", err)
			return
		}
		fn(a)
	})
}

// appendAlert appends a as json.Marshal writes it.
func appendAlert(b []byte, a throttle.Alert) []byte {
	b = append(b, `{"policy":`...)
	b = appendString(b, a.Policy)
	b = append(b, `,"room":`...)
	b = appendString(b, a.Room)
	b = append(b, `,"user":`...)
	b = appendString(b, a.User)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, a.Count, 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, a.Limit, 10)
	b = append(b, `,"at":"`...)
	b = a.At.AppendFormat(b)
	b = append(b, '"')
	if a.Until != nil {
		b = append(b, `,"until":"`...)
		b = a.Until.AppendFormat(b)
		b = append(b, '"')
	}
	if a.Event != "" {
		b = append(b, `,"event":`...)
		b = appendString(b, a.Event)
	}
	if a.Cost != 0 {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, a.Cost, 10)
	}
	if a.Spike != nil { // rare: a spike's crossing
		why, _ := json.Marshal(a.Spike) // numbers only: never fails
		b = append(b, `,"spike":`...)
		b = append(b, why...)
	}
	return append(b, '}')
}

// appendString appends s as a JSON string, as json.Marshal writes it: as
// it is, between quotes, when it holds nothing that json escapes (most
// names), and by json.Marshal itself when it does.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string never fails to marshal
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// alertID is an alert's Nats-Msg-Id: its policy, room, user (quoted, as
// Go quotes them) and time, which name the crossing.
func alertID(a throttle.Alert) string {
	b := make([]byte, 0, 64)
	b = append(b, a.Policy...)
	b = append(b, '|')
	b = strconv.AppendQuote(b, a.Room)
	b = append(b, '|')
	b = strconv.AppendQuote(b, a.User)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(a.At), 10)
	return string(b)
}
