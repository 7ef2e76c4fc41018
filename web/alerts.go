package web

import (
	"encoding/json"

	"github.com/chatpulse/chatpulse/throttle"
)

// Alerts on the websocket are coalesced into the push: a client that
// subscribed to the alerts view gets, at most once per push interval, one
// frame with the alerts that came since the last,
//
//	{"type":"alerts","data":[{"policy",...},...],"omitted":N}
//
// data holds at most maxAlertsPerFrame of them, oldest first, and omitted
// counts those left out: the older ones of a busy interval, the ones the
// hub was too far behind to take, and, for a client that has not written
// its frames for maxAlertFrames pushes, the frames it dropped (it then gets
// a frame with no data and their count). So every alert a client was
// subscribed for is either in a frame it gets or counted in one: a flood
// of alerts costs each client one frame per push, never one per alert.

const (
	maxAlertsPerFrame = 50 // what a dashboard shows
	maxAlertFrames    = 4  // unsent alert frames a client keeps
)

// pendingAlerts are the hub's alerts since the last push.
type pendingAlerts struct {
	alerts  []throttle.Alert // the newest, up to twice maxAlertsPerFrame
	omitted int64            // older ones dropped
}

// add keeps an alert for the next push. Past twice the frame's bound the
// older half goes in one copy, so an alert costs O(1) however many come.
func (p *pendingAlerts) add(a throttle.Alert) {
	if len(p.alerts) == 2*maxAlertsPerFrame {
		p.alerts = p.alerts[:copy(p.alerts, p.alerts[maxAlertsPerFrame:])]
		p.omitted += maxAlertsPerFrame
	}
	p.alerts = append(p.alerts, a)
}

// take empties p into one frame, counting missed alerts as omitted; no
// frame if there was nothing.
func (p *pendingAlerts) take(missed int64) alertFrame {
	keep := p.alerts[max(0, len(p.alerts)-maxAlertsPerFrame):]
	omitted := p.omitted + missed + int64(len(p.alerts)-len(keep))
	var f alertFrame
	if len(keep) > 0 || omitted > 0 {
		f = newAlertFrame(keep, omitted)
	}
	clear(p.alerts)
	p.alerts, p.omitted = p.alerts[:0], 0
	return f
}

// alertFrame is an alerts frame and how many alerts it stands for.
type alertFrame struct {
	frame []byte
	n     int64 // len(data) + omitted
}

func newAlertFrame(alerts []throttle.Alert, omitted int64) alertFrame {
	if alerts == nil {
		alerts = []throttle.Alert{}
	}
	b, _ := json.Marshal(struct {
		Type    string           `json:"type"`
		Data    []throttle.Alert `json:"data"`
		Omitted int64            `json:"omitted"`
	}{"alerts", alerts, omitted})
	return alertFrame{frame: b, n: int64(len(alerts)) + omitted}
}
