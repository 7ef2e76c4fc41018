package bus

import (
	"encoding/json"

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
