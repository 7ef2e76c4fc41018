package throttle

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/measure"
)

// rules are a Set's policies, in the order of decisions, and what the
// messages they see must carry.
type rules struct {
	policies []*policy
	text     bool // some policy needs the text's hash
	// Some policy's key includes the user, or the room: msg carries its
	// hash.
	byUser, byRoom bool
	// newMembers is the longest NewMembers: how long first sightings are
	// kept (0: none are).
	newMembers time.Duration
	// what are the counts that the policies' costs weigh: msg carries
	// them (0: none does).
	what measure.What
}

type policy struct {
	Policy
	rooms   []chat.Glob
	exempts []chat.Glob // ExemptUsers, compiled
	enforce bool
	text    bool // the key includes the text: only messages with text count
	joins   bool // counts joins (join_wave), decides no message
	spike   bool // watches a room's messages (spike), decides none
	similar bool // decides only a check that carries a text (similar)
	// The decisions of Check, shared by every version of the policy of
	// this name (Reconfigure).
	decisions *decisions
}

// decisions are the counts of Check's decisions of a policy, by result.
type decisions struct{ allowed, denied, shadowDenied atomic.Uint64 }

func (p *policy) sees(room string) bool {
	if len(p.rooms) == 0 {
		return true
	}
	for i := range p.rooms {
		if p.rooms[i].Match(room) {
			return true
		}
	}
	return false
}

// newRules checks the policies, fills in their defaults and compiles them.
func newRules(policies []Policy) (rules, error) {
	var r rules
	seen := make(map[string]bool)
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return rules{}, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		if seen[p.Name] {
			return rules{}, fmt.Errorf("policy %q: name: defined twice", p.Name)
		}
		seen[p.Name] = true
		p = p.withDefaults()
		p.Rooms = slices.Clone(p.Rooms)
		alg := algorithmNamed(p.Algorithm)
		pol := &policy{Policy: p, enforce: p.Mode == ModeEnforce, text: alg.text, joins: alg.joins, spike: alg.spike, similar: alg == &similarAlg, decisions: new(decisions)}
		for _, g := range p.Rooms {
			cg, _ := chat.CompileGlob(g)
			pol.rooms = append(pol.rooms, cg)
		}
		for _, g := range p.ExemptUsers {
			cg, _ := chat.CompileGlob(g)
			pol.exempts = append(pol.exempts, cg)
		}
		r.policies = append(r.policies, pol)
		r.text = r.text || alg.text
		r.what |= p.Cost.what()
		r.newMembers = max(r.newMembers, p.NewMembers)
		r.byUser = r.byUser || p.Scope == ScopeUser || p.Scope == ScopeUserInRoom || alg.spike || alg == &similarAlg // a spike and similar count users
		r.byRoom = r.byRoom || p.Scope == ScopeRoom || p.Scope == ScopeUserInRoom
	}
	return r, nil
}
