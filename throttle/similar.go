package throttle

import (
	"fmt"
	"math"

	"go.yaml.in/yaml/v3"
)

// AlgSimilar names a policy that counts alike texts (docs/contract.md
// section 15): with scope room, a message is over once limit distinct
// users posted texts alike to it within the window (a copy-paste wave
// from many accounts); with scope user, once the user posted limit
// earlier texts alike to it.
//
// Alike is a share of word pairs (pairs.go): at least Similarity of the
// pairs either text has are in both. Texts of fewer than MinChars code
// points, as sent, are alike to nothing, and so are texts of fewer than
// two words. A policy keeps, per key, each message of the window as its
// fingerprint (the hashes of its word pairs, at most simK of them), the
// hash of its user and its instant; never its text.
//
// How a message finds the alike ones: each fingerprint is indexed by a
// few keys made of its smallest hashes (fingerprint.keys: one for a text
// of fewer than 20 pairs), and a message is compared with the identical
// fingerprint and with every one that shares a key with it, exactly (or,
// for a text of more than simK pairs, by its sample). Texts with a share
// of 0.95 or more always share a key. So a text of at most simK distinct
// pairs is found alike to another exactly when their share reaches
// Similarity and they share a key: always at 0.95 and above, never below
// Similarity; between, some are missed (docs/contract.md, "Alike",
// measures how many). Identical fingerprints are kept once, with their
// messages.
//
// Observing a message needs only to know whether it is over: it stops
// at the limit-th alike user (over). A check, a crossing and Active count
// them all. A marked key's wave is counted again only once its
// retry_after has passed (holds).
//
// Time is continuous, to the millisecond, as for Repeat: a message at p
// is in the window at T iff T - W < p <= T. A late message still in the
// window is counted; a check or message at an instant before the newest
// one the key has seen is decided at that newest one.
//
// Alerts. A room (or user) crosses with the first message over the limit;
// it then stays marked, and no other message alerts, while a check with
// that message's text would still be denied (the wave holds): messages of
// other texts that are allowed meanwhile do not end it, so a wave is one
// crossing of the room however busy the room is. Active lists the key
// with the wave's count.
const AlgSimilar Algorithm = "similar"

// Defaults of a similar policy.
const (
	DefaultSimilarity = 0.8
	DefaultMinChars   = 12
)

// similarAlg is the row of similar in the table of algorithms: its store
// is its own (simStore), not a table of fixed-size states.
var similarAlg = algorithm{name: AlgSimilar, kernel: simMaker{}}

// simMaker makes the store of a similar policy.
type simMaker struct{}

func (simMaker) check(s settings) *FieldError {
	_, _, err := checkLimitWindow(s, MaxLimit)
	return err
}

func (simMaker) newStore(s settings, scope Scope, _ bool, max int, hk *hashKey) store {
	return newSimStore(s, scope, max, hk)
}

func (simMaker) carry(s, _ settings, from store, mark bool) store {
	return from.(*simStore).carry(s, mark)
}

// simDefaults fills in a similar policy's similarity and min_chars.
func (p Policy) simDefaults() Policy {
	if p.Algorithm != AlgSimilar {
		return p
	}
	if p.Similarity == 0 {
		p.Similarity = DefaultSimilarity
	}
	if p.MinChars == 0 {
		p.MinChars = DefaultMinChars
	}
	return p
}

// validateSimilar checks similarity and min_chars (0: the default), and
// the scopes a similar policy takes.
func (p Policy) validateSimilar(alg *algorithm) *FieldError {
	if alg != &similarAlg {
		switch {
		case p.Similarity != 0:
			return fieldErr("similarity", "only similar has a similarity, not %s", alg.name)
		case p.MinChars != 0:
			return fieldErr("min_chars", "only similar has a min_chars, not %s", alg.name)
		}
		return nil
	}
	switch {
	case p.Scope != ScopeRoom && p.Scope != ScopeUser:
		return fieldErr("scope", "similar counts the alike texts of a room's users (room) or of one user (user), got %s", p.Scope)
	case math.IsNaN(p.Similarity) || p.Similarity < 0 || p.Similarity > 1:
		return fieldErr("similarity", "%v is out of range (above 0, at most 1)", p.Similarity)
	case p.MinChars < 0:
		return fieldErr("min_chars", "%d is below 1", p.MinChars)
	case !p.Cost.unit():
		return fieldErr("cost", "similar counts the users (or messages) that posted alike texts, and weighs nothing")
	case p.MinChars > maxMinChars:
		return fieldErr("min_chars", "%d is above %d (an event is at most 64 KiB)", p.MinChars, maxMinChars)
	}
	return nil
}

// maxMinChars is the largest min_chars: no text of an event is longer.
const maxMinChars = 65536

// millionths is a similarity as a Set compares it: at least one
// millionth.
func millionths(similarity float64) int64 {
	return max(1, int64(math.Round(similarity*simScale)))
}

// parseSimilar sets a similar policy's similarity or min_chars from the
// policies file, or says why it cannot: in the file, unlike in a Policy,
// 0 is not the default but out of range.
func parseSimilar(p *Policy, field string, v *yaml.Node) string {
	if field == "min_chars" {
		var x int64
		if v.ShortTag() != "!!int" || v.Decode(&x) != nil {
			return fmt.Sprintf("%q is not an integer", v.Value)
		}
		if x < 1 || x > maxMinChars {
			return fmt.Sprintf("%d is out of range (1 to %d)", x, maxMinChars)
		}
		p.MinChars = int(x)
		return ""
	}
	var x float64
	if tag := v.ShortTag(); tag != "!!float" && tag != "!!int" || v.Decode(&x) != nil {
		return fmt.Sprintf("%q is not a number", v.Value)
	}
	if !(x > 0 && x <= 1) {
		return fmt.Sprintf("%v is out of range (above 0, at most 1)", v.Value)
	}
	p.Similarity = x
	return ""
}
