package ingest

import "github.com/prometheus/client_golang/prometheus"

// metrics are the ingest counters of docs/contract.md section 7, updated once per
// batch.
type metrics struct {
	received, accepted, ignored prometheus.Counter
	rejected                    map[Reason]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		return c
	}
	m := &metrics{
		received: counter("chatpulse_events_received_total", "Messages received on the event subject."),
		accepted: counter("chatpulse_events_accepted_total", "Chat messages counted."),
		ignored:  counter("chatpulse_events_ignored_total", "Valid events of another type than message, accepted and not counted."),
		rejected: map[Reason]prometheus.Counter{},
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatpulse_events_rejected_total",
		Help: "Events rejected and sent to chatpulse.deadletter.<reason>.",
	}, []string{"reason"})
	reg.MustRegister(vec)
	for _, r := range Reasons() {
		m.rejected[r] = vec.WithLabelValues(string(r)) // exported at 0 from the start
	}
	return m
}
