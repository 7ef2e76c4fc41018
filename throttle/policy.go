package throttle

import (
	"fmt"
	"time"
)

// Scope says whose messages share one counter.
type Scope string

// The scopes of contract section 5.
const (
	ScopeUser       Scope = "user"         // one counter per user, across rooms
	ScopeRoom       Scope = "room"         // one counter per room, across users
	ScopeUserInRoom Scope = "user_in_room" // one counter per user and room
	ScopeGroup      Scope = "group"        // one counter for all the rooms the policy sees
)

// Algorithm names a rate-limiting algorithm.
type Algorithm string

// The algorithms; see the type of the same name for how each works.
const (
	AlgSlidingWindow        Algorithm = "sliding_window"         // SlidingWindow
	AlgSlidingWindowCounter Algorithm = "sliding_window_counter" // SlidingWindowCounter
	AlgFixedWindow          Algorithm = "fixed_window"           // FixedWindow
	AlgTokenBucket          Algorithm = "token_bucket"           // TokenBucket
	AlgGCRA                 Algorithm = "gcra"                   // GCRA
	AlgRepeat               Algorithm = "repeat"                 // Repeat
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

// Bounds on a policy's numbers. They keep every computation in 64-bit
// integers and the memory of one key small.
const (
	MaxLimit          = 1_000_000            // limit and burst
	MaxRepeatLimit    = 100                  // Repeat keeps limit times per text
	MaxWindow         = 366 * 24 * time.Hour // window
	MaxBuckets        = 3600                 // window/resolution of a sliding_window: 4 bytes each per key
	DefaultResolution = time.Second          // of a sliding_window
	maxNameLen        = 64                   // policy names are metric label values
	allAlgorithms     = "sliding_window, sliding_window_counter, fixed_window, token_bucket, gcra, repeat"
)

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
}

// DefaultPolicies returns the policies that apply without a policies file
// (contract section 5), with their defaults filled in.
func DefaultPolicies() []Policy {
	return []Policy{
		{Name: "user_room_flood", Scope: ScopeUserInRoom, Algorithm: AlgSlidingWindow, Limit: 10, Window: 10 * time.Second, Resolution: DefaultResolution, Mode: ModeEnforce},
		{Name: "user_flood", Scope: ScopeUser, Algorithm: AlgSlidingWindow, Limit: 30, Window: time.Minute, Resolution: DefaultResolution, Mode: ModeEnforce},
		{Name: "repeated_text", Scope: ScopeUser, Algorithm: AlgRepeat, Limit: 1, Window: 30 * time.Second, Mode: ModeShadow},
	}
}

// A FieldError says which setting of a policy is wrong and why.
type FieldError struct {
	Field string // "window", "rooms[1]", ...
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// withDefaults fills in the settings left at zero that have a default.
func (p Policy) withDefaults() Policy {
	if p.Mode == "" {
		p.Mode = ModeEnforce
	}
	if p.Algorithm == AlgSlidingWindow && p.Resolution == 0 {
		p.Resolution = DefaultResolution
	}
	if (p.Algorithm == AlgTokenBucket || p.Algorithm == AlgGCRA) && p.Burst == 0 {
		p.Burst = p.Limit
	}
	if p.Rooms != nil && len(p.Rooms) == 0 {
		p.Rooms = nil
	}
	return p
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
	switch p.Algorithm {
	case AlgSlidingWindow, AlgSlidingWindowCounter, AlgFixedWindow, AlgTokenBucket, AlgGCRA, AlgRepeat:
	default:
		return fieldErr("algorithm", "%q is not an algorithm (valid: %s)", p.Algorithm, allAlgorithms)
	}
	switch p.Mode {
	case "", ModeEnforce, ModeShadow:
	default:
		return fieldErr("mode", "%q is not a mode (valid: enforce, shadow)", p.Mode)
	}
	maxLimit := MaxLimit
	if p.Algorithm == AlgRepeat {
		maxLimit = MaxRepeatLimit
	}
	if p.Limit < 1 || p.Limit > maxLimit {
		return fieldErr("limit", "%d is out of range (1 to %d)", p.Limit, maxLimit)
	}
	if err := validDuration("window", p.Window, MaxWindow); err != nil {
		return err
	}
	if p.Algorithm == AlgSlidingWindow {
		res := p.Resolution
		if res == 0 {
			res = DefaultResolution
		}
		if err := validDuration("resolution", res, p.Window); err != nil {
			return err
		}
		if p.Window%res != 0 {
			return fieldErr(field(p.Resolution != 0, "resolution", "window"), "window %v is not a whole multiple of resolution %v", p.Window, res)
		}
		if n := p.Window / res; n > MaxBuckets {
			return fieldErr(field(p.Resolution != 0, "resolution", "window"), "window %v at resolution %v is %d buckets, more than %d: use a larger resolution", p.Window, res, n, MaxBuckets)
		}
	} else if p.Resolution != 0 {
		return fieldErr("resolution", "only sliding_window has a resolution, not %s", p.Algorithm)
	}
	if p.Algorithm == AlgTokenBucket || p.Algorithm == AlgGCRA {
		if p.Burst < 0 || p.Burst > MaxLimit {
			return fieldErr("burst", "%d is out of range (1 to %d)", p.Burst, MaxLimit)
		}
	} else if p.Burst != 0 {
		return fieldErr("burst", "only token_bucket and gcra have a burst, not %s", p.Algorithm)
	}
	for i, g := range p.Rooms {
		if _, err := compileGlob(g); err != nil {
			return fieldErr(fmt.Sprintf("rooms[%d]", i), "%q is not a valid glob: %v", g, err)
		}
	}
	return nil
}

// field is the name of the field an error is about: the one that was set.
func field(set bool, name, otherwise string) string {
	if set {
		return name
	}
	return otherwise
}

func validName(name string) *FieldError {
	if name == "" {
		return fieldErr("name", "is empty")
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

func validDuration(field string, d, most time.Duration) *FieldError {
	switch {
	case d <= 0:
		return fieldErr(field, "%v must be positive", d)
	case d%time.Millisecond != 0:
		return fieldErr(field, "%v is not a whole number of milliseconds", d)
	case d > most:
		return fieldErr(field, "%v is longer than %v", d, most)
	}
	return nil
}

// mustKernel returns the algorithm of a policy, which must be valid except
// for its name and scope (the standalone constructors have neither).
func mustKernel(p Policy) any {
	p.Name, p.Scope = "standalone", ScopeUser
	if err := p.Validate(); err != nil {
		panic("throttle: " + string(p.Algorithm) + ": " + err.Error())
	}
	return newKernel(p.withDefaults())
}

// newKernel returns the kernel of a valid policy with defaults filled in.
func newKernel(p Policy) any {
	limit, w := int64(p.Limit), p.Window.Milliseconds()
	switch p.Algorithm {
	case AlgSlidingWindow:
		res := p.Resolution.Milliseconds()
		return slidingKernel{limit: limit, n: w / res, res: res}
	case AlgSlidingWindowCounter:
		return counterKernel{limit: limit, w: w}
	case AlgFixedWindow:
		return fixedKernel{limit: limit, w: w}
	case AlgTokenBucket:
		burst := int64(p.Burst)
		return bucketKernel{limit: limit, burst: burst, w: w, capacity: burst * w, fill: ceilDiv(burst*w, limit)}
	case AlgGCRA:
		burst := int64(p.Burst)
		return gcraKernel{limit: limit, burst: burst, i: w, tau: (burst - 1) * w}
	case AlgRepeat:
		return repeatKernel{limit: limit, w: w}
	}
	panic("throttle: unknown algorithm " + string(p.Algorithm))
}
