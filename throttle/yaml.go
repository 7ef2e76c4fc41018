package throttle

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/chatpulse/chatpulse/internal/yamlnode"
	"github.com/chatpulse/chatpulse/rolling"
)

// LoadPolicies reads a policies file; see ParsePolicies.
func LoadPolicies(path string) ([]Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	return ParsePolicies(path, data)
}

// ParsePolicies parses a policies file (docs/contract.md section 5) and validates
// every policy, returning them with their defaults filled in:
//
//	policies:
//	  - name: user_room_flood
//	    scope: user_in_room
//	    algorithm: sliding_window
//	    limit: 10
//	    window: 10s
//
// name, scope, algorithm, limit and window are required (a spike has no
// limit); resolution, burst, mode, rooms, penalty, escalate,
// strikes_within, exempt_users, exempt_roles, new_members, act, lock_for,
// cost, a spike's baseline, factor, min_messages and min_users, and a
// similar policy's similarity and min_chars are optional (see Policy).
// Durations are Go durations plus
// d for days (rolling.ParseDuration). Unknown fields, a field given twice and two
// policies with one name are errors. An error names the file, the line and
// the field, as in
//
//	policies.yaml:7: policies[1].window: "10x" is not a duration
//
// An empty list (policies: []) is valid and means no throttling.
func ParsePolicies(file string, data []byte) ([]Policy, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlnode.Error(file, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty file: want a policies: list", file)
	}
	root := yamlnode.Deref(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping with a policies: list", file, root.Line)
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := yamlnode.Deref(root.Content[i]), yamlnode.Deref(root.Content[i+1])
		switch {
		case k.Value != "policies":
			return nil, fmt.Errorf("%s:%d: %s: unknown field (valid: policies)", file, k.Line, k.Value)
		case list != nil:
			return nil, fmt.Errorf("%s:%d: policies: defined twice", file, k.Line)
		case v.Kind != yaml.SequenceNode:
			return nil, fmt.Errorf("%s:%d: policies: want a list of policies", file, v.Line)
		}
		list = v
	}
	if list == nil {
		return nil, fmt.Errorf("%s:%d: policies: missing", file, root.Line)
	}
	policies := []Policy{}
	names := make(map[string]bool)
	for i, item := range list.Content {
		p, lines, err := parsePolicy(file, i, yamlnode.Deref(item))
		if err != nil {
			return nil, err
		}
		if names[p.Name] {
			return nil, fmt.Errorf("%s:%d: policies[%d].name: %q is already the name of another policy", file, lines["name"], i, p.Name)
		}
		names[p.Name] = true
		policies = append(policies, p)
	}
	return policies, nil
}

var policyFields = []string{"name", "scope", "algorithm", "limit", "window", "resolution", "burst", "mode", "rooms", "penalty", "escalate", "strikes_within", "exempt_users", "exempt_roles", "new_members", "act", "lock_for", "baseline", "factor", "min_messages", "min_users", "cost", "similarity", "min_chars"}

// parsePolicy parses policies[i] and returns it with the line of each field
// it has.
func parsePolicy(file string, i int, n *yaml.Node) (Policy, map[string]int, error) {
	var p Policy
	lines := make(map[string]int)
	fail := func(line int, field, format string, args ...any) (Policy, map[string]int, error) {
		path := fmt.Sprintf("policies[%d]", i)
		if field != "" {
			path += "." + field
		}
		return Policy{}, nil, fmt.Errorf("%s:%d: %s: %s", file, line, path, fmt.Sprintf(format, args...))
	}
	if n.Kind != yaml.MappingNode {
		return fail(n.Line, "", "want a mapping of name, scope, algorithm, limit, window...")
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := yamlnode.Deref(n.Content[j]), yamlnode.Deref(n.Content[j+1])
		field := k.Value
		if k.Kind != yaml.ScalarNode || !slices.Contains(policyFields, field) {
			return fail(k.Line, field, "unknown field (valid: %s)", strings.Join(policyFields, ", "))
		}
		if _, dup := lines[field]; dup {
			return fail(k.Line, field, "defined twice")
		}
		lines[field] = v.Line
		if field == "escalate" {
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				return fail(v.Line, field, "want a list of durations, like [1m, 10m, 1h]")
			}
			for r, g := range v.Content {
				g = yamlnode.Deref(g)
				f := fmt.Sprintf("escalate[%d]", r)
				lines[f] = g.Line
				d, err := rolling.ParseDuration(g.Value)
				if g.Kind != yaml.ScalarNode || err != nil {
					return fail(g.Line, f, "%q is not a duration (examples: 90s, 5m, 1h, 7d)", g.Value)
				}
				p.Escalate = append(p.Escalate, d)
			}
			continue
		}
		if field == "rooms" || field == "exempt_users" || field == "exempt_roles" || field == "act" {
			if v.Kind != yaml.SequenceNode {
				return fail(v.Line, field, "want a list of strings, like [\"support-*\"]")
			}
			list := []string{}
			for r, g := range v.Content {
				g = yamlnode.Deref(g)
				f := fmt.Sprintf("%s[%d]", field, r)
				lines[f] = g.Line
				if g.Kind != yaml.ScalarNode || g.ShortTag() == "!!null" {
					return fail(g.Line, f, "want a string")
				}
				list = append(list, g.Value)
			}
			switch field {
			case "rooms":
				p.Rooms = list
			case "exempt_users":
				p.ExemptUsers = list
			case "act":
				for _, k := range list {
					p.Act = append(p.Act, ActKind(k))
				}
			default:
				p.ExemptRoles = list
			}
			continue
		}
		if field == "cost" {
			c, line, f, msg := parseCost(v, lines)
			if msg != "" {
				return fail(line, f, "%s", msg)
			}
			p.Cost = c
			continue
		}
		if v.Kind != yaml.ScalarNode {
			return fail(v.Line, field, "want a single value")
		}
		if v.ShortTag() == "!!null" {
			return fail(v.Line, field, "has no value")
		}
		s := v.Value
		if msg := p.setSpikeField(field, v); msg != "" {
			return fail(v.Line, field, "%s", msg)
		}
		switch field {
		case "name":
			p.Name = s
		case "scope":
			p.Scope = Scope(s)
		case "algorithm":
			p.Algorithm = Algorithm(s)
		case "mode":
			if s == "" {
				return fail(v.Line, field, `"" is not a mode (valid: enforce, shadow)`)
			}
			p.Mode = Mode(s)
		case "limit", "burst":
			var x int64
			if v.ShortTag() != "!!int" || v.Decode(&x) != nil {
				return fail(v.Line, field, "%q is not an integer", s)
			}
			if x < 1 || x > MaxLimit {
				return fail(v.Line, field, "%d is out of range (1 to %d)", x, MaxLimit)
			}
			if field == "limit" {
				p.Limit = int(x)
			} else {
				p.Burst = int(x)
			}
		case "similarity", "min_chars":
			if err := parseSimilar(&p, field, v); err != "" {
				return fail(v.Line, field, "%s", err)
			}
		case "window", "resolution", "penalty", "strikes_within", "new_members", "lock_for":
			d, err := rolling.ParseDuration(s)
			if err != nil {
				return fail(v.Line, field, "%v", err)
			}
			if d <= 0 {
				return fail(v.Line, field, "%s must be positive", s)
			}
			switch field {
			case "window":
				p.Window = d
			case "resolution":
				p.Resolution = d
			case "penalty":
				p.Penalty = d
			case "new_members":
				p.NewMembers = d
			case "lock_for":
				p.LockFor = d
			default:
				p.StrikesWithin = d
			}
		}
	}
	for _, f := range policyFields[:5] {
		if _, ok := lines[f]; !ok && (f != "limit" || p.Algorithm != AlgSpike) {
			return fail(n.Line, f, "missing (name, scope, algorithm, limit and window are required)")
		}
	}
	if err := p.validate(); err != nil {
		line, ok := lines[err.Field]
		if !ok {
			line = n.Line
		}
		return fail(line, err.Field, "%s", err.Msg)
	}
	return p.withDefaults(), lines, nil
}
