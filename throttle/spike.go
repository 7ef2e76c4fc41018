package throttle

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/chatpulse/chatpulse/rolling"
)

// AlgSpike names a room's spike detector in a Policy (docs/contract.md
// section 15): a room's messages in its window against the room's own
// rate over a longer baseline.
//
// Time is cut into buckets of the policy's resolution r, as for
// SlidingWindow: b(t) = floor(t/r). With a window of n buckets and a
// baseline of N (N > n), read at bucket T:
//
//   - the window holds the messages of buckets [T-n+1, T], W of them, from
//     U distinct users;
//   - the baseline span holds those of [T-N+1, T-n], B of them: the room's
//     past, the window left out;
//   - the room is over when W >= factor · B · n / (N-n), the window's share
//     of the baseline's rate times factor, and W >= min_messages and
//     U >= min_users. A room with no past (B = 0) is over on the last two
//     alone.
//
// So with window 1m, baseline 1h and factor 5, a room that had 590
// messages in the 59 minutes before the last one is over once its last
// minute holds 50 (5 · 590/59), from 3 users. The comparison is made in
// integers, with factor in thousandths: a window exactly at the factor is
// over.
//
// A spike decides no message: it is in no check's decisions, and it never
// denies. Its crossing alerts once; while the room is over it is listed in
// Active; and, as a join wave does, it turns on the policies with
// NewMembers in the room (see Set.applies).
//
// The crossing is the first message after which the room is over, since
// a message after which it was not: each message is decided at the
// room's newest instant once it is counted. A room with no message in a
// whole baseline starts over, as if never seen. A message counted by a
// consuming check is decided when its event comes (see spikeStore.hit),
// so that a check another stage of a group takes back never alerted.
//
// The state of a room is exact and as large as what its windows hold (see
// spikeRoom): the window's messages with their users' hashes, and the
// baseline's buckets that hold messages, one count each.
const AlgSpike Algorithm = "spike"

// The defaults of a spike's options, and their bounds.
const (
	DefaultFactor      = 5
	DefaultMinMessages = 20
	DefaultMinUsers    = 3
	MaxFactor          = 1_000_000
)

// spikeAlg is the row of the spike in the table of algorithms.
var spikeAlg = algorithm{name: AlgSpike, resolution: true, spike: true, kernel: spikeMaker{}}

// spikeSettings are a spike policy's own numbers (zero: the default).
type spikeSettings struct {
	baseline    time.Duration
	factor      float64
	minMessages int
	minUsers    int
}

func (p Policy) spikeSettings() spikeSettings {
	return spikeSettings{baseline: p.Baseline, factor: p.Factor, minMessages: p.MinMessages, minUsers: p.MinUsers}
}

// spikeRule is a spike policy's numbers as its store uses them.
type spikeRule struct {
	res, n, span int64 // the bucket width (ms), the window's buckets, the baseline's (N)
	window       int64 // ms: how long an id is remembered
	factor       int64 // thousandths
	minMessages  int64
	minUsers     int64
}

// newSpikeRule checks the settings of a spike and returns its rule.
func newSpikeRule(s settings) (spikeRule, *FieldError) {
	sp := s.spike
	switch {
	case s.limit != 0:
		return spikeRule{}, fieldErr("limit", "a spike has none: it crosses at factor times the room's own rate")
	case sp.baseline == 0:
		return spikeRule{}, fieldErr("baseline", "missing: a spike compares its window with the room's rate over a longer baseline")
	}
	if err := validDuration("window", s.window, MaxWindow); err != nil {
		return spikeRule{}, err
	}
	if err := validDuration("baseline", sp.baseline, MaxWindow); err != nil {
		return spikeRule{}, err
	}
	if sp.baseline <= s.window {
		return spikeRule{}, fieldErr("baseline", "%v is not longer than window %v", sp.baseline, s.window)
	}
	res := s.resolution
	if res == 0 {
		res = DefaultResolution
	}
	if err := validDuration("resolution", res, s.window); err != nil {
		return spikeRule{}, err
	}
	field := "window" // when the two do not fit, the one that was set is to blame
	if s.resolution != 0 {
		field = "resolution"
	}
	if s.window%res != 0 {
		return spikeRule{}, fieldErr(field, "window %v is not a whole multiple of resolution %v", s.window, res)
	}
	if s.resolution == 0 {
		field = "baseline"
	}
	if sp.baseline%res != 0 {
		return spikeRule{}, fieldErr(field, "baseline %v is not a whole multiple of resolution %v", sp.baseline, res)
	}
	if n := sp.baseline / res; n > MaxBuckets {
		return spikeRule{}, fieldErr(field, "baseline %v at resolution %v is %d buckets, more than %d: use a larger resolution", sp.baseline, res, n, MaxBuckets)
	}
	factor, err := factorMilli(sp.factor)
	if err != nil {
		return spikeRule{}, err
	}
	r := spikeRule{res: res.Milliseconds(), window: s.window.Milliseconds(), factor: factor}
	r.n, r.span = r.window/r.res, sp.baseline.Milliseconds()/r.res
	for _, f := range []struct {
		name     string
		v, deflt int
		to       *int64
	}{{"min_messages", sp.minMessages, DefaultMinMessages, &r.minMessages}, {"min_users", sp.minUsers, DefaultMinUsers, &r.minUsers}} {
		switch {
		case f.v == 0:
			*f.to = int64(f.deflt)
		case f.v < 1 || f.v > MaxLimit:
			return spikeRule{}, fieldErr(f.name, "%d is out of range (1 to %d)", f.v, MaxLimit)
		default:
			*f.to = int64(f.v)
		}
	}
	return r, nil
}

// factorMilli is a factor (0: the default) in thousandths. A factor has
// at most three decimals, so that a window exactly at it is over, as the
// decimal says, not as its nearest binary fraction would.
func factorMilli(f float64) (int64, *FieldError) {
	switch {
	case f == 0:
		return DefaultFactor * 1000, nil
	case math.IsNaN(f) || math.IsInf(f, 0):
		return 0, fieldErr("factor", "%v is not a number", f)
	case f < 1 || f > MaxFactor:
		return 0, fieldErr("factor", "%v is out of range (1 to %d)", f, MaxFactor)
	}
	m := math.Round(f * 1000)
	if m/1000 != f {
		return 0, fieldErr("factor", "%v has more than three decimals", f)
	}
	return int64(m), nil
}

// spikeMaker is the spike's kernelMaker: its store is not a table of
// kernels, since a room's state holds its users, which no kernel sees.
type spikeMaker struct{}

func (spikeMaker) check(s settings) *FieldError {
	_, err := newSpikeRule(s)
	return err
}

func (spikeMaker) newStore(s settings, _ Scope, _ bool, max int, hk *hashKey) store {
	r, err := newSpikeRule(s)
	if err != nil {
		panic("throttle: the store of an invalid policy: " + err.Error())
	}
	return newSpikeStore(r, max)
}

func (spikeMaker) carry(s, _ settings, from store, mark bool) store {
	r, err := newSpikeRule(s)
	if err != nil {
		panic("throttle: the store of an invalid policy: " + err.Error())
	}
	return from.(*spikeStore).carry(r, mark)
}

// validateSpike checks what a spike policy may not have, and that no
// other policy has a spike's options.
func (p Policy) validateSpike(alg *algorithm) *FieldError {
	if !alg.spike {
		for _, f := range []struct {
			name string
			set  bool
		}{{"baseline", p.Baseline != 0}, {"factor", p.Factor != 0}, {"min_messages", p.MinMessages != 0}, {"min_users", p.MinUsers != 0}} {
			if f.set {
				return notTaken(alg, f.name, func(a *algorithm) bool { return a.spike })
			}
		}
		return nil
	}
	const decides = "a spike decides no message and denies nothing"
	switch {
	case p.Scope != ScopeRoom:
		return fieldErr("scope", "a spike watches a room against its own past: scope room, got %s", p.Scope)
	case p.NewMembers != 0:
		return fieldErr("new_members", "%s: it turns the new_members policies of its room on", decides)
	case p.Penalty != 0:
		return fieldErr("penalty", decides)
	case len(p.Escalate) > 0:
		return fieldErr("escalate", decides)
	case p.StrikesWithin != 0:
		return fieldErr("strikes_within", decides)
	case len(p.ExemptUsers) > 0:
		return fieldErr("exempt_users", "%s: every message counts", decides)
	case len(p.ExemptRoles) > 0:
		return fieldErr("exempt_roles", "%s: every message counts", decides)
	case len(p.Act) > 0:
		return fieldErr("act", "%s, so it acts on nothing", decides)
	}
	return nil
}

// withSpikeDefaults fills in a spike's options left at zero.
func (p *Policy) withSpikeDefaults() {
	if p.Factor == 0 {
		p.Factor = DefaultFactor
	}
	if p.MinMessages == 0 {
		p.MinMessages = DefaultMinMessages
	}
	if p.MinUsers == 0 {
		p.MinUsers = DefaultMinUsers
	}
}

// describeSpike is the part of describe of a spike's options: none for
// another policy, so that their saved states read as before spikes.
func describeSpike(p Policy) string {
	if p.Algorithm != AlgSpike {
		return ""
	}
	return fmt.Sprintf(", baseline %v, factor %v, min_messages %d, min_users %d", p.Baseline, p.Factor, p.MinMessages, p.MinUsers)
}

// A Spike says why a spike policy's room is over (or not yet): beside an
// Alert's or an Active's count (the window's messages) and limit (the
// least count that is over: factor times Expected, rounded up, and at
// least min_messages).
type Spike struct {
	// Users is how many distinct users posted the window's messages.
	Users int64 `json:"users"`
	// BaselineMessages is how many messages the baseline span holds.
	BaselineMessages int64 `json:"baseline_messages"`
	// Expected is the window's share of the baseline's rate:
	// BaselineMessages · window / (baseline - window), to 3 decimals.
	Expected float64 `json:"expected"`
	// Ratio is the window's messages over Expected, to 3 decimals; 0 (and
	// absent in JSON) when the baseline span holds no message.
	Ratio float64 `json:"ratio,omitempty"`
}

// spikeCounts are what a room holds at one bucket: the window's messages
// and users, and the baseline span's messages.
type spikeCounts struct{ w, u, b int64 }

// over reports whether a room with counts c is over.
func (k *spikeRule) over(c spikeCounts) bool {
	if c.w < k.minMessages || c.u < k.minUsers {
		return false
	}
	// w·(N-n)·1000 >= factor·b·n, in 128 bits: w and b reach 2^44, the
	// other factors 2^42.
	lh, ll := bits.Mul64(uint64(c.w), uint64((k.span-k.n)*1000))
	rh, rl := bits.Mul64(uint64(c.b), uint64(k.factor*k.n))
	return lh > rh || lh == rh && ll >= rl
}

// threshold is the least window count that is over with b messages in
// the baseline span (given enough users): max(min_messages,
// ceil(factor·b·n / ((N-n)·1000))), math.MaxInt64 past int64.
func (k *spikeRule) threshold(b int64) int64 {
	hi, lo := bits.Mul64(uint64(b), uint64(k.factor*k.n))
	den := uint64((k.span - k.n) * 1000)
	if hi >= den {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, den)
	if rem != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return max(k.minMessages, int64(q))
}

// verdict is a room's Verdict with counts c: Allowed when it is not over
// (a spike denies nothing: only waveHolds and Active read it), with why.
func (k *spikeRule) verdict(c spikeCounts) Verdict {
	limit := k.threshold(c.b)
	v := Verdict{Allowed: !k.over(c), Count: c.w, Limit: limit, Remaining: max(0, limit-c.w)}
	why := &Spike{Users: c.u, BaselineMessages: c.b}
	if c.b > 0 {
		exp := float64(c.b) * float64(k.n) / float64(k.span-k.n)
		why.Expected, why.Ratio = round3(exp), round3(float64(c.w)/exp)
	}
	v.spike = why
	return v
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// bucket is the bucket of an instant.
func (k *spikeRule) bucket(at int64) int64 { return rolling.FloorDiv(at, k.res) }

// setSpikeField sets a spike's option from its YAML value v, if field is
// one, and says what is wrong with it ("" if nothing, or if field is not
// a spike's).
func (p *Policy) setSpikeField(field string, v *yaml.Node) string {
	switch field {
	case "baseline":
		d, err := rolling.ParseDuration(v.Value)
		switch {
		case err != nil:
			return err.Error()
		case d <= 0:
			return fmt.Sprintf("%s must be positive", v.Value)
		}
		p.Baseline = d
	case "factor":
		var f float64
		if tag := v.ShortTag(); tag != "!!int" && tag != "!!float" || v.Decode(&f) != nil {
			return fmt.Sprintf("%q is not a number", v.Value)
		}
		if f == 0 {
			return fmt.Sprintf("0 is out of range (1 to %d)", MaxFactor)
		}
		if _, err := factorMilli(f); err != nil {
			return err.Msg
		}
		p.Factor = f
	case "min_messages", "min_users":
		var x int64
		if v.ShortTag() != "!!int" || v.Decode(&x) != nil {
			return fmt.Sprintf("%q is not an integer", v.Value)
		}
		if x < 1 || x > MaxLimit {
			return fmt.Sprintf("%d is out of range (1 to %d)", x, MaxLimit)
		}
		if field == "min_messages" {
			p.MinMessages = int(x)
		} else {
			p.MinUsers = int(x)
		}
	}
	return ""
}
