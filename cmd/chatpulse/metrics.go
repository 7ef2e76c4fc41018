package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/throttle"
)

// statsCollector exports the aggregator's and the throttle set's numbers,
// read once per scrape. Every labelled series known up front (each window,
// each policy and result of the policies in force) is there from the start,
// at 0.
type statsCollector struct {
	stats   stats
	dropped func() uint64
	windows []string
	labels  func() []throttle.DecisionLabel // of the policies in force

	rooms, users, pairs, members, late, decisions, keys, evicted, drops *prometheus.Desc
}

// stats are the numbers behind the metrics: one aggregator and throttle
// set's (standalone), or the partitions' a group member holds.
type stats interface {
	Stats() aggregator.Stats
	ThrottleStats() []throttle.PolicyStats
}

func newStatsCollector(st stats, windows []string, labels func() []throttle.DecisionLabel, dropped func() uint64) *statsCollector {
	return &statsCollector{
		stats: st, dropped: dropped, windows: windows, labels: labels,
		rooms:     prometheus.NewDesc("chatpulse_tracked_rooms", "Rooms with messages in some window.", nil, nil),
		users:     prometheus.NewDesc("chatpulse_tracked_users", "Users with messages in some window.", nil, nil),
		pairs:     prometheus.NewDesc("chatpulse_tracked_room_users", "(room, user) pairs with messages in some window.", nil, nil),
		members:   prometheus.NewDesc("chatpulse_tracked_members", "(room, user) memberships remembered: the last join or leave of each, for two largest windows (docs/contract.md section 12).", nil, nil),
		late:      prometheus.NewDesc("chatpulse_events_late_total", "Events a window skipped because they were older than it.", []string{"window"}, nil),
		decisions: prometheus.NewDesc("chatpulse_throttle_decisions_total", "Throttle check decisions per policy.", []string{"policy", "result"}, nil),
		keys:      prometheus.NewDesc("chatpulse_throttle_keys", "Keys a throttle policy tracks.", []string{"policy"}, nil),
		evicted:   prometheus.NewDesc("chatpulse_throttle_keys_evicted_total", "Keys a policy dropped because it hit its cap on tracked keys.", []string{"policy"}, nil),
		drops:     prometheus.NewDesc("chatpulse_events_dropped_total", "Messages the NATS client dropped because chatpulse fell behind (core NATS only).", nil, nil),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rooms, c.users, c.pairs, c.members, c.late, c.decisions, c.keys, c.evicted, c.drops} {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats.Stats()
	ch <- prometheus.MustNewConstMetric(c.rooms, prometheus.GaugeValue, float64(st.Rooms))
	ch <- prometheus.MustNewConstMetric(c.users, prometheus.GaugeValue, float64(st.Users))
	ch <- prometheus.MustNewConstMetric(c.pairs, prometheus.GaugeValue, float64(st.Pairs))
	ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(st.Members))
	ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(c.dropped()))
	for i, w := range c.windows {
		ch <- prometheus.MustNewConstMetric(c.late, prometheus.CounterValue, float64(st.Late[i]), w)
	}
	byPolicy := map[string]throttle.PolicyStats{}
	for _, ps := range c.stats.ThrottleStats() {
		byPolicy[ps.Policy] = ps
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(ps.Keys), ps.Policy)
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(ps.Evicted), ps.Policy)
	}
	for _, l := range c.labels() {
		ps := byPolicy[l.Policy]
		var n uint64
		switch l.Result {
		case throttle.ResultAllowed:
			n = ps.Allowed
		case throttle.ResultDenied:
			n = ps.Denied
		case throttle.ResultShadowDenied:
			n = ps.ShadowDenied
		}
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(n), l.Policy, l.Result)
	}
}

// readyGauge is /readyz as a metric, chatpulse_ready, so that an alert
// rule can see an instance that never catches up: 1 once the replay has
// caught up (at once without JetStream), 0 before.
func readyGauge(ready func() bool) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatpulse_ready", Help: "1 once the JetStream replay has caught up (/readyz answers 200), 0 before.",
	}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	})
}
