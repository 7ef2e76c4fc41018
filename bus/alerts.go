package bus

import (
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/chatpulse/chatpulse/throttle"
)

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
	return append(b, `"}`...)
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
