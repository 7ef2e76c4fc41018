package throttle

import (
	"fmt"
	"strings"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/moderation"
)

// Mode says whether a policy's denials count.
type Mode string

// The modes. A shadow policy is decided and reported like any other, but
// never makes a Check's Allowed false, never alerts and never shows in
// Active: it is how a new policy is tried on real traffic.
const (
	ModeEnforce Mode = "enforce"
	ModeShadow  Mode = "shadow"
)

// maxNameLen is the longest policy name: names are metric label values.
const maxNameLen = 64

// algorithms is the table of algorithms, one row from each algorithm's
// file, in the order in which errors list them.
var algorithms = []*algorithm{&slidingAlg, &counterAlg, &fixedAlg, &bucketAlg, &gcraAlg, &repeatAlg, &joinWaveAlg, &spikeAlg, &similarAlg}

// algorithmNamed returns the row of the algorithm called name, or nil.
func algorithmNamed(name Algorithm) *algorithm {
	for _, a := range algorithms {
		if a.name == name {
			return a
		}
	}
	return nil
}

// A Policy is one moderation rule: at most Limit messages per Window, per
// key of Scope, counted by Algorithm, in the rooms matching Rooms.
type Policy struct {
	// Name identifies the policy in answers, alerts and metrics: 1 to 64
	// characters among letters, digits, '_', '-' and '.'.
	Name      string
	Scope     Scope
	Algorithm Algorithm
	// Limit is the messages allowed per window; for token_bucket and gcra,
	// the refill rate (tokens per window).
	Limit int
	// Window is the length of the window, whole milliseconds, at most 366d.
	Window time.Duration
	// Resolution is the bucket width of a sliding_window (0: 1s). Window must
	// be a whole multiple of it. Other algorithms have none.
	Resolution time.Duration
	// Burst is the bucket capacity of token_bucket and gcra (0: Limit).
	// Other algorithms have none.
	Burst int
	// Mode is enforce (also when empty) or shadow.
	Mode Mode
	// Rooms restricts the policy to the rooms matching one of these globs;
	// empty means every room. In a glob, '*' matches any run of characters
	// (including none, and including '/'), '?' exactly one character, and
	// '\' makes the next character literal; '[' and ']' are reserved and must
	// be escaped. Matching is on the whole room name, case-sensitive.
	Rooms []string
	// Penalty, if set, keeps a key that crosses an enforcing policy (its
	// first message or consuming check over the limit) denied for at least
	// that long, even once its rate has fallen (docs/contract.md section
	// 11). Escalate, instead, gives the Nth crossing within StrikesWithin
	// the Nth step (the last step for every later one); StrikesWithin is
	// 24h when Escalate is set without it. Whole milliseconds, at most
	// MaxWindow. A shadow policy has none.
	Penalty       time.Duration   `json:",omitempty"`
	Escalate      []time.Duration `json:",omitempty"`
	StrikesWithin time.Duration   `json:",omitempty"`
	// ExemptUsers (globs, as Rooms) and ExemptRoles are not held by the
	// policy: a check of one of those users, or that carries one of those
	// roles, is allowed by it and says so (docs/contract.md section 11).
	ExemptUsers []string `json:",omitempty"`
	ExemptRoles []string `json:",omitempty"`
	// NewMembers, if set, makes the policy apply only to the users whose
	// first event in the room (a join or a message) is younger than it,
	// and only while a join wave (a join_wave policy over its limit) holds
	// in the room: how a raid is slowed without touching regular members
	// (docs/contract.md section 12). Room and user_in_room scopes only.
	NewMembers time.Duration `json:",omitempty"`
	// Act is what chatpulse does on the chat system when a key crosses the
	// policy, with --act (docs/contract.md section 14): mute or redact for
	// a message policy, lock for a join_wave. LockFor is how long a lock
	// holds after the wave's last crossing (0: DefaultLockFor; with lock
	// only). A shadow policy's acts are what it would have done.
	Act     []ActKind     `json:",omitempty"`
	LockFor time.Duration `json:",omitempty"`
	// Baseline, Factor, MinMessages and MinUsers are a spike's (AlgSpike,
	// docs/contract.md section 15), which has no Limit; zero Factor,
	// MinMessages and MinUsers stand for their defaults. Factor has at
	// most three decimals. Other algorithms have none.
	Baseline    time.Duration `json:",omitempty"`
	Factor      float64       `json:",omitempty"`
	MinMessages int           `json:",omitempty"`
	MinUsers    int           `json:",omitempty"`
	// Cost weighs what a message carries (docs/contract.md section 15):
	// Limit is in its unit. The zero Cost is {Messages: 1}, and so is
	// every message policy's without one. A join_wave has none.
	Cost Cost `json:",omitzero"`
	// Similarity and MinChars are a similar policy's (similar.go): the
	// share of word pairs at which two texts are alike, in (0, 1]
	// (0: DefaultSimilarity), and the fewest code points of a text that
	// can be (0: DefaultMinChars). Other algorithms have neither.
	Similarity float64 `json:",omitempty"`
	MinChars   int     `json:",omitempty"`
}

// DefaultStrikesWithin is how long a crossing counts toward an escalating
// penalty's next step when StrikesWithin is not set.
const DefaultStrikesWithin = 24 * time.Hour

// maxSteps is the most steps an Escalate may have.
const maxSteps = 16

// DefaultPolicies returns the policies that apply without a policies file
// (docs/contract.md section 5), with their defaults filled in.
func DefaultPolicies() []Policy {
	return []Policy{
		{Name: "user_room_flood", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 10, Window: 10 * time.Second, Resolution: DefaultResolution, Mode: ModeEnforce},
		{Name: "user_flood", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 30, Window: time.Minute, Resolution: DefaultResolution, Mode: ModeEnforce},
		{Name: "repeated_text", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 1, Window: 30 * time.Second, Mode: ModeShadow},
	}
}

// withDefaults fills in the settings left at zero that have a default.
func (p Policy) withDefaults() Policy {
	if p.Mode == "" {
		p.Mode = ModeEnforce
	}
	if a := algorithmNamed(p.Algorithm); a != nil {
		if a.resolution && p.Resolution == 0 {
			p.Resolution = DefaultResolution
		}
		if a.burst && p.Burst == 0 {
			p.Burst = p.Limit
		}
		if a.spike {
			p.withSpikeDefaults()
		}
	}
	if p.Rooms != nil && len(p.Rooms) == 0 {
		p.Rooms = nil
	}
	if len(p.ExemptUsers) == 0 {
		p.ExemptUsers = nil
	}
	if len(p.ExemptRoles) == 0 {
		p.ExemptRoles = nil
	}
	if len(p.Escalate) > 0 && p.StrikesWithin == 0 {
		p.StrikesWithin = DefaultStrikesWithin
	}
	if len(p.Act) == 0 {
		p.Act = nil
	}
	if p.Acts(ActLock) && p.LockFor == 0 {
		p.LockFor = DefaultLockFor
	}
	if p.Cost.unit() {
		p.Cost = Cost{}
	}
	return p.simDefaults()
}

// Validate reports the first setting of p that is not valid, as a
// *FieldError. Zero Mode, Resolution and Burst stand for their defaults.
func (p Policy) Validate() error {
	if err := p.validate(); err != nil {
		return err
	}
	return nil
}

func (p Policy) validate() *FieldError {
	if err := validName(p.Name); err != nil {
		return err
	}
	switch p.Scope {
	case ScopeUser, ScopeRoom, ScopeUserInRoom, ScopeGroup:
	default:
		return fieldErr("scope", "%q is not a scope (valid: user, room, user_in_room, group)", p.Scope)
	}
	alg := algorithmNamed(p.Algorithm)
	if alg == nil {
		names := make([]string, len(algorithms))
		for i, a := range algorithms {
			names[i] = string(a.name)
		}
		return fieldErr("algorithm", "%q is not an algorithm (valid: %s)", p.Algorithm, strings.Join(names, ", "))
	}
	switch p.Mode {
	case "", ModeEnforce, ModeShadow:
	default:
		return fieldErr("mode", "%q is not a mode (valid: enforce, shadow)", p.Mode)
	}
	if err := alg.kernel.check(p.settings()); err != nil {
		return err
	}
	if !alg.resolution && p.Resolution != 0 {
		return notTaken(alg, "resolution", func(a *algorithm) bool { return a.resolution })
	}
	if !alg.burst && p.Burst != 0 {
		return notTaken(alg, "burst", func(a *algorithm) bool { return a.burst })
	}
	for i, g := range p.Rooms {
		if _, err := chat.CompileGlob(g); err != nil {
			return fieldErr(fmt.Sprintf("rooms[%d]", i), "%q is not a valid glob: %v", g, err)
		}
	}
	for i, g := range p.ExemptUsers {
		if _, err := chat.CompileGlob(g); err != nil {
			return fieldErr(fmt.Sprintf("exempt_users[%d]", i), "%q is not a valid glob: %v", g, err)
		}
	}
	for i, r := range p.ExemptRoles {
		if err := moderation.CheckRole(r); err != nil {
			return fieldErr(fmt.Sprintf("exempt_roles[%d]", i), "%v", err)
		}
	}
	if err := p.validateSpike(alg); err != nil {
		return err
	}
	if err := p.validateJoins(alg); err != nil {
		return err
	}
	if err := p.Cost.validate(); err != nil {
		return err
	}
	switch {
	case alg.joins && !p.Cost.unit():
		return fieldErr("cost", "a join_wave counts joins, which carry nothing to weigh")
	case alg.spike && !p.Cost.unit():
		return fieldErr("cost", "a spike compares a room's message rates, and weighs nothing")
	}
	if err := p.validateAct(alg); err != nil {
		return err
	}
	if err := p.validateSimilar(alg); err != nil {
		return err
	}
	return p.validatePenalty()
}

// validateJoins checks what join waves and new members need.
func (p Policy) validateJoins(alg *algorithm) *FieldError {
	switch {
	case alg.joins && p.Scope != ScopeRoom:
		return fieldErr("scope", "a join_wave counts a room's joins: scope room, got %s", p.Scope)
	case p.NewMembers == 0:
		return nil
	case alg.joins:
		return fieldErr("new_members", "a join_wave decides no message")
	case p.Scope != ScopeRoom && p.Scope != ScopeUserInRoom:
		return fieldErr("new_members", "only with scope room or user_in_room (the room's owner knows who is new), got %s", p.Scope)
	}
	return validDuration("new_members", p.NewMembers, MaxWindow)
}

// validatePenalty checks Penalty, Escalate and StrikesWithin.
func (p Policy) validatePenalty() *FieldError {
	switch {
	case p.Penalty != 0 && len(p.Escalate) > 0:
		return fieldErr("escalate", "give penalty or escalate, not both")
	case p.StrikesWithin != 0 && len(p.Escalate) == 0:
		return fieldErr("strikes_within", "only with escalate")
	case len(p.Escalate) > maxSteps:
		return fieldErr("escalate", "%d steps, more than %d", len(p.Escalate), maxSteps)
	case p.Mode == ModeShadow && (p.Penalty != 0 || len(p.Escalate) > 0):
		return fieldErr("mode", "a shadow policy takes no penalty (it never denies)")
	}
	if p.Penalty != 0 {
		if err := validDuration("penalty", p.Penalty, MaxWindow); err != nil {
			return err
		}
	}
	for i, d := range p.Escalate {
		if err := validDuration(fmt.Sprintf("escalate[%d]", i), d, MaxWindow); err != nil {
			return err
		}
	}
	if p.StrikesWithin != 0 {
		return validDuration("strikes_within", p.StrikesWithin, MaxWindow)
	}
	return nil
}

// step is the penalty of a key's nth crossing within StrikesWithin
// (n >= 1), in ms; 0: none.
func (p *Policy) step(n int) int64 {
	if len(p.Escalate) > 0 {
		return p.Escalate[min(n, len(p.Escalate))-1].Milliseconds()
	}
	return p.Penalty.Milliseconds()
}

// penalized reports whether the policy has a penalty.
func (p *Policy) penalized() bool { return p.Penalty != 0 || len(p.Escalate) > 0 }

func validName(name string) *FieldError {
	if name == "" {
		return fieldErr("name", "is empty")
	}
	if name == ActionSlowmode || name == ActionTimeout {
		return fieldErr("name", "%q names a moderator's action in decisions and Active: choose another", name)
	}
	if len(name) > maxNameLen {
		return fieldErr("name", "%q is longer than %d characters", name, maxNameLen)
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fieldErr("name", "%q: only letters, digits, '_', '-' and '.' are allowed", name)
		}
	}
	return nil
}

// settings are the numbers of p.
func (p Policy) settings() settings {
	s := settings{limit: p.Limit, window: p.Window, resolution: p.Resolution, burst: p.Burst, spike: p.spikeSettings(), price: priceOf(p.Cost)}
	s.similarity, s.minChars = millionths(p.simDefaults().Similarity), p.simDefaults().MinChars
	return s
}

// notTaken is the error of a policy of a that sets an option a does not
// take: it names the algorithms that do.
func notTaken(a *algorithm, option string, takes func(*algorithm) bool) *FieldError {
	var names []string
	for _, b := range algorithms {
		if takes(b) {
			names = append(names, string(b.name))
		}
	}
	list, verb := names[len(names)-1], "has"
	if n := len(names); n > 1 {
		list, verb = strings.Join(names[:n-1], ", ")+" and "+list, "have"
	}
	return fieldErr(option, "only %s %s a %s, not %s", list, verb, option, a.name)
}
