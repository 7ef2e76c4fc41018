package group

import (
	"errors"
	"fmt"
	"iter"

	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/throttle"
)

// rules are a member's throttle policies, split as its stages use them:
// the room stage decides room and user_in_room policies (a room's owner
// sees all its users), the user stage user policies, and partition 0's
// all stage group policies.
type rules struct {
	policies []throttle.Policy
	byScope  map[throttle.Scope][]throttle.Policy
	order    map[string]int // policy name -> its place in the policies
}

// newRules splits policies by stage, checking that each stage's are a
// valid set.
func newRules(policies []throttle.Policy) (*rules, error) {
	r := &rules{policies: policies, byScope: map[throttle.Scope][]throttle.Policy{}, order: map[string]int{}}
	for i, p := range policies {
		scope := p.Scope
		if scope == throttle.ScopeUserInRoom {
			scope = throttle.ScopeRoom
		}
		r.byScope[scope] = append(r.byScope[scope], p)
		r.order[p.Name] = i
	}
	if _, err := throttle.NewSet(policies); err != nil { // distinct names across the stages too
		return nil, err
	}
	return r, nil
}

// ofStage is the policies a stage decides.
func (r *rules) ofStage(name string) []throttle.Policy {
	switch name {
	case stageRoom:
		return r.byScope[throttle.ScopeRoom]
	case stageUser:
		return r.byScope[throttle.ScopeUser]
	case stageAll:
		return r.byScope[throttle.ScopeGroup]
	}
	return nil
}

// errGroupScope refuses a reload that would need partition 0 to read the
// stream another way.
var errGroupScope = errors.New("a running group member cannot add the first group-scoped policy or remove the last one (partition 0 reads every event only for them): restart the group's members with the new policies")

// Reconfigure makes policies the member's, on every partition it holds and
// every one it takes from then on, or on none: they are checked first,
// whole, and refused with the error NewSet gives if not valid. It is
// throttle.Set.Reconfigure on each stage's set, with what that keeps: a
// policy of unchanged name, scope, algorithm and window keeps its state; a
// new or changed one starts empty. Once the member runs, a change that
// adds the first group-scoped policy or removes the last is refused too.
//
// Every member given the same policies (a watched key-value key) decides
// as the others do; each applies them when it hears of them, so for a
// moment (well under a second) two members may decide with different
// ones. The group's settings do not record the policies: members may run
// different ones, and a partition's snapshot is loaded only by a member
// whose policies are those it was saved under.
func (m *Member) Reconfigure(policies []throttle.Policy) error {
	r, err := newRules(policies)
	if err != nil {
		return err
	}
	m.mu.Lock()
	running := m.running
	had := len(m.rules.Load().byScope[throttle.ScopeGroup]) > 0
	m.mu.Unlock()
	if running && had != (len(r.byScope[throttle.ScopeGroup]) > 0) {
		return errGroupScope
	}
	return m.keeper.Reconfigure(m.consumer.Pause, func() (string, error) {
		var err error
		m.parts.change(func(held iter.Seq2[*partition, bool]) {
			for pt := range held { // a parked partition resumes under the policies in force
				for _, s := range pt.stages {
					if s.Thr == nil {
						continue
					}
					if err2 := s.Thr.Reconfigure(r.ofStage(s.Name)); err2 != nil {
						err = fmt.Errorf("partition %d, stage %s: %w", pt.p, s.Name, err2) // checked whole above: cannot be
					}
				}
			}
			m.rules.Store(r)
		})
		m.metrics.track(policies)
		return engine.ConfigOf(m.cfg.Windows, policies, m.cfg.Partitions), err
	})
}
