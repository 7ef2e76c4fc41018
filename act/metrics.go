package act

import "github.com/prometheus/client_golang/prometheus"

// metrics are an Actor's (docs/operating.md).
type metrics struct {
	acts    *prometheus.CounterVec // by kind and result
	limited prometheus.Counter
}

// The results of an act, for chatpulse_acts_total.
var results = []string{"done", "shadow", "skipped", "failed", "dropped"}

func newMetrics(a *Actor, reg prometheus.Registerer) *metrics {
	m := &metrics{
		acts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chatpulse_acts_total",
			Help: "Acts on the chat system and their undos, by kind and result: done, shadow (--act-mode shadow), skipped (a moderator, the bot, an exempt user, nothing to change), failed, dropped (the queue was full)."}, []string{"kind", "result"}),
		limited: prometheus.NewCounter(prometheus.CounterOpts{Name: "chatpulse_act_rate_limited_total",
			Help: "Changes the homeserver answered with 429 M_LIMIT_EXCEEDED: each was made again after the wait it asked for."}),
	}
	for _, k := range []Kind{Mute, Unmute, Redact, Lock, Unlock} {
		for _, r := range results {
			m.acts.WithLabelValues(string(k), r)
		}
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.acts, m.limited,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chatpulse_act_queue", Help: "Changes waiting for the homeserver."},
			func() float64 { n, _ := a.q.waiting(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chatpulse_act_rooms_without_power", Help: "Rooms where the bot had to act and lacks a power it needs (GET /api/v1/act lists them)."},
			func() float64 { return float64(a.withoutPower()) }),
	)
	return m
}

func (m *metrics) acted(k Kind, result string) { m.acts.WithLabelValues(string(k), result).Inc() }
