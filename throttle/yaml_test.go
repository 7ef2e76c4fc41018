package throttle

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatpulse/chatpulse/chat"
)

const goodPolicies = `# moderation policies
policies:
  - name: user_room_flood
    scope: user_in_room      # user | room | user_in_room | group
    algorithm: sliding_window
    limit: 10
    window: 10s
  - name: user_flood
    scope: user
    algorithm: sliding_window
    limit: 30
    window: 1m
  - name: repeated_text
    scope: user
    algorithm: repeat
    limit: 1
    window: 30s
    mode: shadow
  - name: support_desk
    scope: group
    algorithm: token_bucket
    limit: 100
    window: 1h
    burst: 20
    rooms: ["support-*", 'help\?']
  - name: weekly
    scope: user
    algorithm: sliding_window
    limit: 5000
    window: 7d
    resolution: 1h
`

func TestParsePoliciesGood(t *testing.T) {
	ps, err := ParsePolicies("policies.yaml", []byte(goodPolicies))
	if err != nil {
		t.Fatal(err)
	}
	want := append(DefaultPolicies(),
		Policy{Name: "support_desk", Scope: ScopeGroup, Algorithm: AlgTokenBucket, Limit: 100, Window: time.Hour, Burst: 20, Mode: ModeEnforce, Rooms: []string{"support-*", `help\?`}},
		Policy{Name: "weekly", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 5000, Window: 7 * 24 * time.Hour, Resolution: time.Hour, Mode: ModeEnforce},
	)
	if !reflect.DeepEqual(ps, want) {
		t.Fatalf("got  %+v\nwant %+v", ps, want)
	}
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(goodPolicies), 0o600); err != nil {
		t.Fatal(err)
	}
	if ps2, err := LoadPolicies(path); err != nil || !reflect.DeepEqual(ps2, ps) {
		t.Fatalf("LoadPolicies: %v", err)
	}
	if _, err := LoadPolicies(path + ".missing"); err == nil || !strings.Contains(err.Error(), "p.yaml.missing") {
		t.Errorf("missing file: %v", err)
	}
	s := mustSet(t, ps)
	for room, want := range map[string]bool{"help?": true, "helpX": false, "support-": true, "lobby": false} {
		found := false
		for _, d := range s.Check(0, room, "u", "", false).Decisions {
			found = found || d.Policy == "support_desk"
		}
		if found != want {
			t.Errorf("support_desk sees %q: %v, want %v", room, found, want)
		}
	}
	if ps, err := ParsePolicies("p.yaml", []byte("policies: []\n")); err != nil || len(ps) != 0 {
		t.Errorf("empty list: %v %v", ps, err)
	}
}

func TestParsePoliciesErrors(t *testing.T) {
	policy := func(extra string) string {
		return "policies:\n  - name: ok\n    scope: user\n    algorithm: sliding_window\n    limit: 10\n    window: 10s\n" +
			"  - name: p\n    scope: user\n    algorithm: token_bucket\n    limit: 10\n" + extra
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"bad duration", policy("    window: 10x\n"), `policies.yaml:11: policies[1].window: "10x" is not a duration (examples: 90s, 5m, 1h, 7d)`},
		{"missing unit", policy("    window: 10\n"), `policies.yaml:11: policies[1].window: "10" is not a duration (missing unit, like 10s)`},
		{"unknown field", policy("    window: 10s\n    windw: 5s\n"), `policies.yaml:12: policies[1].windw: unknown field (valid: name, scope, algorithm, limit, window, resolution, burst, mode, rooms, penalty, escalate, strikes_within, exempt_users, exempt_roles, new_members, act, lock_for, baseline, factor, min_messages, min_users, cost, similarity, min_chars)`},
		{"missing window", policy(""), `policies.yaml:7: policies[1].window: missing`},
		{"unknown algorithm", strings.Replace(policy("    window: 1s\n"), "token_bucket", "leaky", 1), `policies.yaml:9: policies[1].algorithm: "leaky" is not an algorithm`},
		{"unknown scope", strings.Replace(policy("    window: 1s\n"), "scope: user\n    algorithm: token", "scope: everyone\n    algorithm: token", 1), `policies.yaml:8: policies[1].scope: "everyone" is not a scope`},
		{"unknown mode", policy("    window: 1s\n    mode: loud\n"), `policies.yaml:12: policies[1].mode: "loud" is not a mode`},
		{"limit 0", strings.Replace(policy("    window: 1s\n"), "limit: 10\n    window: 10s", "limit: 0\n    window: 10s", 1), `policies.yaml:5: policies[0].limit: 0 is out of range`},
		{"limit text", policy("    window: 1s\n    burst: lots\n"), `policies.yaml:12: policies[1].burst: "lots" is not an integer`},
		{"limit float", policy("    window: 1s\n    burst: 1.5\n"), `policies.yaml:12: policies[1].burst: "1.5" is not an integer`},
		{"window 0", policy("    window: 0s\n"), `policies.yaml:11: policies[1].window: 0s must be positive`},
		{"window negative", policy("    window: -1m\n"), `policies.yaml:11: policies[1].window: "-1m": no sign allowed`},
		{"window sub-ms", policy("    window: 1500us\n"), `policies.yaml:11: policies[1].window: 1.5ms is not a whole number of milliseconds`},
		{"not a multiple", strings.Replace(policy("    window: 1s\n"), "window: 10s", "window: 10s\n    resolution: 3s", 1), `policies.yaml:7: policies[0].resolution: window 10s is not a whole multiple of resolution 3s`},
		{"default resolution", strings.Replace(policy("    window: 1s\n"), "window: 10s", "window: 1500ms", 1), `policies.yaml:6: policies[0].window: window 1.5s is not a whole multiple of resolution 1s`},
		{"too many buckets", strings.Replace(policy("    window: 1s\n"), "window: 10s", "window: 7d", 1), `policies.yaml:6: policies[0].window: window 168h0m0s at resolution 1s is 604800 buckets, more than 3600`},
		{"burst on a window", strings.Replace(policy("    window: 1s\n"), "window: 10s", "window: 10s\n    burst: 3", 1), `policies.yaml:7: policies[0].burst: only token_bucket and gcra have a burst`},
		{"resolution on a bucket", policy("    window: 1s\n    resolution: 1s\n"), `policies.yaml:12: policies[1].resolution: only sliding_window, join_wave and spike have a resolution`},
		{"duplicate name", strings.Replace(policy("    window: 1s\n"), "name: p", "name: ok", 1), `policies.yaml:7: policies[1].name: "ok" is already the name of another policy`},
		{"bad name", strings.Replace(policy("    window: 1s\n"), "name: p", "name: a b", 1), `policies.yaml:7: policies[1].name: "a b": only letters`},
		{"bad glob", policy("    window: 1s\n    rooms:\n      - ok-*\n      - \"[a-z]*\"\n"), `policies.yaml:14: policies[1].rooms[1]: "[a-z]*" is not a valid glob: character classes are not supported`},
		{"rooms not a list", policy("    window: 1s\n    rooms: support-*\n"), `policies.yaml:12: policies[1].rooms: want a list`},
		{"field twice", policy("    window: 1s\n    window: 2s\n"), `policies.yaml:12: policies[1].window: defined twice`},
		{"no value", policy("    window:\n"), `policies.yaml:11: policies[1].window: has no value`},
		{"repeat limit", strings.Replace(policy("    window: 1s\n"), "algorithm: token_bucket\n    limit: 10", "algorithm: repeat\n    limit: 101", 1), `policies.yaml:10: policies[1].limit: 101 is out of range (1 to 100)`},
		{"unknown act", policy("    window: 1s\n    act: [ban]\n"), `policies.yaml:12: policies[1].act[0]: "ban" is not an act (valid: mute, redact, lock)`},
		{"act twice", policy("    window: 1s\n    act: [mute, mute]\n"), `policies.yaml:12: policies[1].act[1]: "mute" is named twice`},
		{"act not a list", policy("    window: 1s\n    act: mute\n"), `policies.yaml:12: policies[1].act: want a list`},
		{"lock on messages", policy("    window: 1s\n    act: [lock]\n"), `policies.yaml:12: policies[1].act[0]: only a join_wave locks a room; token_bucket counts messages (mute, redact)`},
		{"mute a wave", strings.Replace(strings.Replace(policy("    window: 1m\n"), "scope: user\n    algorithm: token_bucket", "scope: room\n    algorithm: join_wave", 1), "window: 1m\n", "window: 1m\n    act: [mute]\n", 1), `policies.yaml:12: policies[1].act[0]: a join_wave decides no message: it can lock its room, not mute`},
		{"mute a room", strings.Replace(policy("    window: 1s\n    act: [mute]\n"), "name: p\n    scope: user", "name: p\n    scope: room", 1), `policies.yaml:12: policies[1].act[0]: mute needs a key that names a user (scope user_in_room or user), got room`},
		{"redact the group", strings.Replace(policy("    window: 1s\n    act: [redact]\n"), "name: p\n    scope: user", "name: p\n    scope: group", 1), `policies.yaml:12: policies[1].act[0]: redact needs a key that names a user or a room (scope user_in_room, user or room), got group`},
		{"lock_for without lock", policy("    window: 1s\n    act: [mute]\n    lock_for: 5m\n"), `policies.yaml:13: policies[1].lock_for: only with act: [lock]`},
		{"policy not a mapping", "policies:\n  - just a string\n", `policies.yaml:2: policies[0]: want a mapping`},
		{"unknown top level", "policy:\n  - name: x\n", `policies.yaml:1: policy: unknown field (valid: policies)`},
		{"policies not a list", "policies: {name: x}\n", `policies.yaml:1: policies: want a list`},
		{"syntax", "policies:\n  - name: x\n   scope: user\n", `policies.yaml:1: did not find expected`},
		{"empty", "", `policies.yaml: empty file`},
		{"not a mapping", "- a\n", `policies.yaml:1: want a mapping with a policies: list`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParsePolicies("policies.yaml", []byte(c.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("error\n got %v\nwant %s...", err, c.want)
			}
		})
	}
}

// FuzzParsePolicies: the parser never panics, every error names the file,
// and whatever it accepts is valid and builds a Set.
func FuzzParsePolicies(f *testing.F) {
	f.Add([]byte(goodPolicies))
	f.Add([]byte("policies: []\n"))
	f.Add([]byte("policies:\n  - {name: c, scope: user, algorithm: repeat, limit: 5, window: 1m, cost: {messages: 1, mentions: 2, chars: 0}}\n"))
	f.Add([]byte("policies:\n  - {name: a, scope: room, algorithm: gcra, limit: 3, window: 1.5d, burst: 9}\n"))
	f.Add([]byte("policies:\n  - &p {name: a, scope: group, algorithm: fixed_window, limit: 1, window: 1ms, rooms: ['*']}\n  - *p\n"))
	f.Add([]byte("policies:\n  - {name: s, scope: room, algorithm: spike, window: 2s, baseline: 1m, factor: 1.5, min_messages: 2, min_users: 1}\n  - {name: n, scope: user_in_room, algorithm: sliding_window, limit: 1, window: 1s, new_members: 1h}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := ParsePolicies("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		for _, p := range ps {
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted %+v: %v", p, err)
			}
		}
		s, err := NewSet(ps, WithMaxKeys(4))
		if err != nil {
			t.Fatalf("accepted policies do not build a Set: %v", err)
		}
		now := int64(1_764_489_600_000)
		for i := range 6 {
			s.Observe(chat.Event{TS: now + int64(i), Room: "support-eu", User: "u", Text: "t"})
		}
		s.Check(now, "support-eu", "u", "t", true)
		s.Active(now)
	})
}

// The acts of contract section 14 parse as the contract writes them; a
// lock holds DefaultLockFor unless lock_for says.
func TestParseActs(t *testing.T) {
	ps, err := ParsePolicies("p.yaml", []byte(`policies:
  - name: user_room_flood
    scope: user_in_room
    algorithm: sliding_window
    limit: 10
    window: 10s
    penalty: 1m
    act: [mute, redact]
  - name: raid
    scope: room
    algorithm: join_wave
    limit: 20
    window: 1m
    act: [lock]
  - name: long_raid
    scope: room
    algorithm: join_wave
    limit: 20
    window: 1m
    act: [lock]
    lock_for: 30m
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		act     []ActKind
		lockFor time.Duration
	}{{[]ActKind{ActMute, ActRedact}, 0}, {[]ActKind{ActLock}, DefaultLockFor}, {[]ActKind{ActLock}, 30 * time.Minute}}
	for i, w := range want {
		if !slices.Equal(ps[i].Act, w.act) || ps[i].LockFor != w.lockFor {
			t.Errorf("%s: act %v, lock_for %v; want %v, %v", ps[i].Name, ps[i].Act, ps[i].LockFor, w.act, w.lockFor)
		}
	}
	if !ps[0].Acts(ActRedact) || ps[0].Acts(ActLock) {
		t.Errorf("Acts of %v", ps[0].Act)
	}
}
