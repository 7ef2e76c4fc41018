package main

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// Where the throttle policies come from, and how a new version of them
// takes effect while chatpulse runs (issue 14): --policies names a file,
// read again on SIGHUP and when it changes (reload.go), or kv:BUCKET/KEY, a
// key of a JetStream key-value bucket, watched. Every new version goes
// through policies.offer: parsed, validated, and applied to every throttle
// set of the instance at once, or refused whole with one log line.

// kvPrefix starts a --policies that names a key-value key, not a file.
const kvPrefix = "kv:"

// policySource is a parsed --policies.
type policySource struct {
	name        string // the file, or kv:BUCKET/KEY; empty: the defaults
	bucket, key string // for kv:
}

// parsePolicySource reads --policies: empty, a file path, or kv:BUCKET/KEY.
func parsePolicySource(flag string) (policySource, error) {
	rest, ok := strings.CutPrefix(flag, kvPrefix)
	if !ok {
		return policySource{name: flag}, nil
	}
	bucket, key, ok := strings.Cut(rest, "/")
	if !ok || bucket == "" || key == "" || strings.ContainsAny(bucket, ". *>/") || strings.ContainsAny(key, " *>") {
		return policySource{}, usagef("--policies %s: want kv:BUCKET/KEY (a bucket name without '.', a key)", flag)
	}
	return policySource{name: flag, bucket: bucket, key: key}, nil
}

func (s policySource) kv() bool { return s.bucket != "" }

// shown is how the source is named in GET /api/v1/throttle/policies.
func (s policySource) shown() string {
	if s.name == "" {
		return "default"
	}
	return s.name
}

// policies are the throttle policies in force, and what offers them new
// versions: the one owner of which policies apply. apply is what makes a
// version take effect on every throttle set of the instance, all or none.
type policies struct {
	source policySource
	log    *slog.Logger
	now    func() time.Time
	apply  func([]throttle.Policy) error
	errors prometheus.Counter // chatpulse_policies_reload_errors_total

	mu      sync.Mutex // one offer at a time; guards what follows
	inForce []throttle.Policy
	labels  []throttle.DecisionLabel
	since   time.Time
	lastErr *reloadError
}

type reloadError struct {
	At    chat.Time `json:"at"`
	Error string    `json:"error"`
}

func newPolicies(source policySource, initial []throttle.Policy, now func() time.Time, log *slog.Logger, reg prometheus.Registerer) *policies {
	p := &policies{source: source, log: log, now: now}
	p.errors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatpulse_policies_reload_errors_total",
		Help: "New versions of the throttle policies (file or key-value key) refused as not valid; the policies in force stayed.",
	})
	reg.MustRegister(p.errors)
	p.set(initial)
	return p
}

// set records ps as the policies in force from now on.
func (p *policies) set(ps []throttle.Policy) {
	s, _ := throttle.NewSet(ps) // valid: applied
	p.inForce, p.labels, p.since, p.lastErr = ps, s.DecisionLabels(), p.now(), nil
}

// list is the policies in force.
func (p *policies) list() []throttle.Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inForce
}

// offer parses data, the new version of the source's policies, and makes
// it the policies in force; a version that is not valid is refused with
// one log line naming the file or key, the line and the field, and counted.
func (p *policies) offer(data []byte) {
	ps, err := throttle.ParsePolicies(p.source.name, data)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && reflect.DeepEqual(ps, p.inForce) {
		p.lastErr = nil // the source holds the policies in force (again)
		return          // touched, or the watch's first value: nothing new
	}
	if err == nil {
		if err = p.apply(ps); err != nil {
			err = fmt.Errorf("%s: %w", p.source.name, err)
		}
	}
	if err != nil {
		p.refuse(err)
		return
	}
	p.set(ps)
	p.log.Info("policies reloaded", "source", p.source.name, "policies", len(ps))
}

// refuse counts and logs a version that did not take effect; the
// policies in force stay.
func (p *policies) refuse(err error) {
	p.errors.Inc()
	p.lastErr = &reloadError{At: chat.Time(p.now().UnixMilli()), Error: err.Error()}
	p.log.Error("policies not reloaded: the policies in force stay", "err", err)
}

// refused counts a version that could not even be read (a file gone, a
// key deleted): the same as one not valid.
func (p *policies) refused(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse(err)
}

func (p *policies) decisionLabels() []throttle.DecisionLabel {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.labels
}

// inForceAnswer is GET /api/v1/throttle/policies.
type inForceAnswer struct {
	Source    string         `json:"source"`
	Since     chat.Time      `json:"since"`
	Policies  []policyAnswer `json:"policies"`
	LastError *reloadError   `json:"last_error,omitempty"`
}

// policyAnswer is a policy as the policies file writes it, defaults
// filled in.
type policyAnswer struct {
	Name        string             `json:"name"`
	Scope       throttle.Scope     `json:"scope"`
	Algorithm   throttle.Algorithm `json:"algorithm"`
	Limit       int                `json:"limit,omitempty"` // none for a spike
	Window      string             `json:"window"`
	Resolution  string             `json:"resolution,omitempty"`
	Burst       int                `json:"burst,omitempty"`
	Mode        throttle.Mode      `json:"mode"`
	Rooms       []string           `json:"rooms"`
	Penalty     string             `json:"penalty,omitempty"`
	Escalate    []string           `json:"escalate,omitempty"`
	Within      string             `json:"strikes_within,omitempty"`
	NewMembers  string             `json:"new_members,omitempty"`
	ExemptUsers []string           `json:"exempt_users,omitempty"`
	ExemptRoles []string           `json:"exempt_roles,omitempty"`
	Act         []throttle.ActKind `json:"act,omitempty"`
	LockFor     string             `json:"lock_for,omitempty"`
	Baseline    string             `json:"baseline,omitempty"` // a spike's, and the three below
	Factor      float64            `json:"factor,omitempty"`
	MinMessages int                `json:"min_messages,omitempty"`
	MinUsers    int                `json:"min_users,omitempty"`
	Cost        map[string]int     `json:"cost,omitempty"`
	Similarity  float64            `json:"similarity,omitempty"`
	MinChars    int                `json:"min_chars,omitempty"`
}

// answer is what is in force, and since when.
func (p *policies) answer() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := inForceAnswer{Source: p.source.shown(), Since: chat.Time(p.since.UnixMilli()), Policies: []policyAnswer{}, LastError: p.lastErr}
	for _, ps := range p.inForce {
		pa := policyAnswer{Name: ps.Name, Scope: ps.Scope, Algorithm: ps.Algorithm, Limit: ps.Limit, Window: rolling.FormatDuration(ps.Window),
			Burst: ps.Burst, Mode: ps.Mode, Rooms: append([]string{}, ps.Rooms...)}
		if ps.Resolution > 0 {
			pa.Resolution = rolling.FormatDuration(ps.Resolution)
		}
		if ps.Penalty > 0 {
			pa.Penalty = rolling.FormatDuration(ps.Penalty)
		}
		for _, d := range ps.Escalate {
			pa.Escalate = append(pa.Escalate, rolling.FormatDuration(d))
		}
		if ps.StrikesWithin > 0 {
			pa.Within = rolling.FormatDuration(ps.StrikesWithin)
		}
		if ps.NewMembers > 0 {
			pa.NewMembers = rolling.FormatDuration(ps.NewMembers)
		}
		pa.ExemptUsers, pa.ExemptRoles, pa.Act = ps.ExemptUsers, ps.ExemptRoles, ps.Act
		if ps.LockFor > 0 {
			pa.LockFor = rolling.FormatDuration(ps.LockFor)
		}
		if ps.Baseline > 0 {
			pa.Baseline = rolling.FormatDuration(ps.Baseline)
		}
		pa.Factor, pa.MinMessages, pa.MinUsers = ps.Factor, ps.MinMessages, ps.MinUsers
		pa.Cost = ps.Cost.Weights()
		pa.Similarity, pa.MinChars = ps.Similarity, ps.MinChars
		a.Policies = append(a.Policies, pa)
	}
	return a
}
