package group

import (
	"iter"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/group/lease"
	"github.com/chatpulse/chatpulse/throttle"
)

// Status is GET /api/v1/group (docs/contract.md section 8).
type Status struct {
	Group      string         `json:"group"`
	Instance   string         `json:"instance"` // the member answering (chatpulse's addition)
	Partitions int            `json:"partitions"`
	Complete   bool           `json:"complete"`
	Members    []MemberStatus `json:"members"`
	// Filer is the member that files a foreign bus's events, with
	// --source-stream (docs/contract.md section 13; chatpulse's addition);
	// empty while none does, absent without --source-stream.
	Filer *string `json:"filer,omitempty"`
	// FilerReady says the filing has caught up: it has filed what the
	// copy held when it began (chatpulse's addition; with Filer).
	FilerReady *bool `json:"filer_ready,omitempty"`
	// Skewed names the members whose clocks are further than --max-skew
	// from the group's (chatpulse's addition).
	Skewed []string `json:"skewed"`
}

// MemberStatus is one live member: how many partitions it owns now, and how
// many messages its partitions have yet to read.
type MemberStatus struct {
	Instance   string `json:"instance"`
	HTTP       string `json:"http"`
	Owns       int    `json:"owns"`
	Lag        uint64 `json:"lag"`
	Partitions []int  `json:"partitions"` // which it owns (chatpulse's addition)
	// ClockOffset is how far its clock is ahead of the group's (the
	// median of the members'), in ms, as its last write said
	// (chatpulse's addition).
	ClockOffset int64 `json:"clock_offset_ms"`
}

// Status says who is in the group and what each owns (a Status).
func (m *Member) Status() any { return m.status() }

func (m *Member) status() Status {
	t := m.leases.Table()
	s := Status{Group: m.cfg.Group, Instance: m.cfg.Instance, Partitions: m.cfg.Partitions, Complete: m.complete(t), Members: []MemberStatus{}, Skewed: []string{}}
	median, skewed := lease.Skews(t.Members, m.cfg.MaxSkew)
	for _, name := range slices.Sorted(maps.Keys(t.Members)) {
		info := t.Members[name]
		ms := MemberStatus{Instance: name, HTTP: info.HTTP, Lag: info.Lag, Partitions: []int{}}
		if info.Clock != 0 {
			ms.ClockOffset = info.Offset - median
		}
		if _, ok := skewed[name]; ok && m.cfg.MaxSkew > 0 {
			s.Skewed = append(s.Skewed, name)
		}
		for p := range m.cfg.Partitions {
			if o, ok := t.Owners[p]; ok && o.Instance == name {
				ms.Partitions = append(ms.Partitions, p)
			}
		}
		ms.Owns = len(ms.Partitions)
		s.Members = append(s.Members, ms)
	}
	if m.filer != nil {
		o := t.Owners[m.cfg.Partitions]
		_, live := t.Members[o.Instance]
		ready := o.Ready && live
		s.Filer, s.FilerReady = &o.Instance, &ready
	}
	return s
}

// complete reports whether every partition has a live, caught-up owner,
// and, with --source-stream, the filing too (it has filed what the copy
// held when it began).
func (m *Member) complete(t *lease.Table) bool {
	n := m.cfg.Partitions
	if m.filer != nil {
		n++ // the filer's lease, one past the last partition
	}
	for p := range n {
		o, ok := t.Owners[p]
		if _, live := t.Members[o.Instance]; !ok || !o.Ready || !live {
			return false
		}
	}
	return true
}

// lag is how many messages this member's partitions have yet to read,
// and, if it files, how many of the copy it has yet to file.
func (m *Member) lag() uint64 {
	var n uint64
	if m.filer != nil {
		n = m.filer.backlog()
	}
	for _, pt := range m.parts.openRuns() {
		for _, s := range pt.stages {
			n += s.feed.Pending()
		}
	}
	return n
}

// Stats adds up the aggregators' numbers over the partitions this member
// runs: rooms from the room stages, users from the user stages.
func (m *Member) Stats() aggregator.Stats {
	st := aggregator.Stats{Late: make([]uint64, len(m.cfg.Windows))}
	m.parts.view(func(held iter.Seq2[*partition, bool]) {
		for pt, running := range held {
			if !running {
				continue
			}
			r := pt.stage(stageRoom).Agg.Stats()
			u := pt.stage(stageUser).Agg.Stats()
			st.Rooms += r.Rooms
			st.Pairs += r.Pairs
			st.Crowds += r.Crowds
			st.Members += r.Members
			st.Users += u.Users
			for i, n := range r.Late {
				st.Late[i] += n
			}
		}
	})
	return st
}

// ThrottleStats adds up each policy's numbers over the partitions this
// member holds and those it held before; decisions are this member's own
// answers to checks.
func (m *Member) ThrottleStats() []throttle.PolicyStats {
	var out []throttle.PolicyStats
	m.parts.view(func(held iter.Seq2[*partition, bool]) {
		r := m.rules.Load() // a reload changes it and the stages' sets under the same lock
		out = make([]throttle.PolicyStats, len(r.policies))
		for i, p := range r.policies {
			out[i] = m.parts.retired[p.Name]
			out[i].Policy = p.Name
			out[i].Allowed, out[i].Denied, out[i].ShadowDenied = m.metrics.decisions(p.Name)
		}
		for pt, running := range held { // a parked run's keys are not tracked now
			for _, s := range pt.stages {
				if s.Thr == nil {
					continue
				}
				for _, ps := range s.Thr.Stats() {
					o := &out[r.order[ps.Policy]]
					if running {
						o.Keys += ps.Keys
					}
					o.Evicted += ps.Evicted
					o.Expired += ps.Expired
				}
			}
		}
	})
	return out
}

// metrics are the group's gauges (docs/contract.md section 8) and the throttle
// decisions of this member's answers.
type metrics struct {
	mu    sync.Mutex
	count map[string]*[3]uint64 // allowed, denied, shadow_denied, per policy
}

func newMetrics(m *Member, reg prometheus.Registerer) *metrics {
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("chatpulse_group_members", "Live members of the group.", func() float64 { return float64(len(m.leases.Table().Members)) })
	gauge("chatpulse_group_partitions_owned", "Partitions this member owns.", func() float64 {
		mine := m.leases.Table().Mine
		if _, filing := mine[m.cfg.Partitions]; filing {
			return float64(len(mine) - 1)
		}
		return float64(len(mine))
	})
	gauge("chatpulse_group_lag_messages", "Messages this member's partitions have yet to read, and, if it files a foreign stream, messages of its copy it has yet to file.", func() float64 { return float64(m.lag()) })
	gauge("chatpulse_group_complete", "1 when every partition has a live, caught-up owner (and, with --source-stream, the filing has caught up).", func() float64 {
		if m.complete(m.leases.Table()) {
			return 1
		}
		return 0
	})
	mt := &metrics{count: map[string]*[3]uint64{}}
	mt.track(m.rules.Load().policies)
	return mt
}

// track counts the decisions of policies from now on; a name counted
// before goes on from where it was, as in a throttle.Set.
func (mt *metrics) track(policies []throttle.Policy) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	for _, p := range policies {
		if mt.count[p.Name] == nil {
			mt.count[p.Name] = new([3]uint64)
		}
	}
}

func (mt *metrics) decided(d throttle.Decision) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	c := mt.count[d.Policy]
	if c == nil {
		return
	}
	switch {
	case d.Allowed:
		c[0]++
	case d.Mode == throttle.ModeEnforce:
		c[1]++
	default:
		c[2]++
	}
}

func (mt *metrics) decisions(policy string) (allowed, denied, shadowDenied uint64) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	c := mt.count[policy]
	if c == nil {
		return 0, 0, 0
	}
	return c[0], c[1], c[2]
}
