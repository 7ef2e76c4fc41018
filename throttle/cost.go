package throttle

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/chatpulse/chatpulse/internal/yamlnode"
	"github.com/chatpulse/chatpulse/measure"
)

// A Cost weighs what a message carries (docs/contract.md section 15): a
// message costs the sum of each weight times its count, and a policy's
// Limit is in that unit. So Cost{Mentions: 1} with Limit 10 and Window
// 10s is "at most ten mentions per ten seconds", and a message that
// mentions nobody costs 0 there.
//
// The counts are package measure's: Mentions, the distinct users the
// message says it mentions (never guessed from its text); Links, the
// http:// and https:// URLs of its text; Newlines, its '\n'; Chars, its
// code points; Emoji, its code points that are Extended_Pictographic.
//
// The zero Cost is the default, {Messages: 1}: every message costs one,
// as it always did, and a policy of it keeps its state as it always did.
type Cost struct {
	Messages, Mentions, Links, Newlines, Chars, Emoji int
}

// MaxWeight is the largest weight of a Cost.
const MaxWeight = MaxLimit

// costFields name a Cost's weights, as the policies file does, in the
// order of weights.
var costFields = []string{"messages", "mentions", "links", "newlines", "chars", "emoji"}

// weights are c's weights, in the order of costFields.
func (c Cost) weights() [6]int {
	return [6]int{c.Messages, c.Mentions, c.Links, c.Newlines, c.Chars, c.Emoji}
}

// set sets the weight named field (one of costFields).
func (c *Cost) set(field string, w int) {
	*map[string]*int{"messages": &c.Messages, "mentions": &c.Mentions, "links": &c.Links,
		"newlines": &c.Newlines, "chars": &c.Chars, "emoji": &c.Emoji}[field] = w
}

// String writes c as the policies file does, the zero weights left out.
func (c Cost) String() string {
	var parts []string
	for i, w := range c.weights() {
		if w != 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", costFields[i], w))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Weights are c's weights by name, as the policies file writes them, the
// zero ones left out; nil for the default, {messages: 1}.
func (c Cost) Weights() map[string]int {
	if c.unit() {
		return nil
	}
	m := map[string]int{}
	for i, w := range c.weights() {
		if w != 0 {
			m[costFields[i]] = w
		}
	}
	return m
}

// unit reports whether c is the default: every message costs 1.
func (c Cost) unit() bool { return c == Cost{} || c == Cost{Messages: 1} }

// validate reports the first weight of c out of range.
func (c Cost) validate() *FieldError {
	for i, w := range c.weights() {
		if w < 0 || w > MaxWeight {
			return fieldErr("cost."+costFields[i], "%d is out of range (0 to %d)", w, MaxWeight)
		}
	}
	return nil
}

// A price is a Cost as a table prices messages with it.
type price struct {
	unit bool     // every message costs 1
	w    [6]int64 // the weights, in the order of costFields
}

func priceOf(c Cost) price {
	p := price{unit: c.unit()}
	for i, w := range c.weights() {
		p.w[i] = int64(w)
	}
	return p
}

// of is the cost of m, at most maxCost. A message whose counts were not
// taken (a check without text or mentions) costs its messages weight.
func (p *price) of(m *msg) int64 {
	if p.unit {
		return 1
	}
	n := &m.counts
	cost := p.w[0]
	for i, count := range [...]int{n.Mentions, n.Links, n.Newlines, n.Chars, n.Emoji} {
		// A weight is at most 10^6 and a count at most maxCost: the sum
		// of six such products fits an int64.
		cost += p.w[i+1] * min(int64(count), maxCost)
	}
	return min(cost, maxCost)
}

// what are the counts of package measure that c weighs.
func (c Cost) what() measure.What {
	counts := [...]measure.What{measure.CountMentions, measure.CountLinks, measure.CountNewlines, measure.CountChars, measure.CountEmoji}
	var w measure.What
	weights := c.weights()
	for i, weight := range weights[1:] {
		if weight != 0 {
			w |= counts[i]
		}
	}
	return w
}

// parseCost parses the cost of a policy in a policies file, a mapping of
// weights by name ({mentions: 1, links: 5}; the weights not named are 0),
// noting the line of each weight in lines ("cost.mentions"). An error
// names the field and the line it is on.
func parseCost(v *yaml.Node, lines map[string]int) (c Cost, line int, field, msg string) {
	if v.Kind != yaml.MappingNode {
		return c, v.Line, "cost", "want a mapping of weights, like {mentions: 1, links: 5} (valid: " + strings.Join(costFields, ", ") + ")"
	}
	for j := 0; j+1 < len(v.Content); j += 2 {
		k, w := yamlnode.Deref(v.Content[j]), yamlnode.Deref(v.Content[j+1])
		f := "cost." + k.Value
		switch {
		case k.Kind != yaml.ScalarNode || !slices.Contains(costFields, k.Value):
			return c, k.Line, f, "unknown weight (valid: " + strings.Join(costFields, ", ") + ")"
		case lines[f] != 0:
			return c, k.Line, f, "defined twice"
		}
		lines[f] = w.Line
		var x int64
		if w.Kind != yaml.ScalarNode || w.ShortTag() != "!!int" || w.Decode(&x) != nil {
			return c, w.Line, f, fmt.Sprintf("%q is not an integer", w.Value)
		}
		if x < 0 || x > MaxWeight {
			return c, w.Line, f, fmt.Sprintf("%d is out of range (0 to %d)", x, MaxWeight)
		}
		c.set(k.Value, int(x))
	}
	if c == (Cost{}) {
		return c, v.Line, "cost", "every weight is 0: every message would cost nothing, and the policy never deny"
	}
	return c, 0, "", ""
}
