package ingest

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/chatpulse/chatpulse/chat"
)

// The mapping front end reads any JSON payload through JSON pointers
// (RFC 6901): where the payload keeps the room, the user, the ts and so
// on. Its pointers are compiled into a trie of their tokens (a plan),
// each node one place in the payload, and the payload is scanned once:
// the scanner walks down the members and elements the trie names and
// skips (checking) everything else, and the value at each place a pointer
// ends is kept for after the scan. Only then are the values read, in a
// fixed order, by the functions the native front end reads its fields
// with. Nothing is allocated unless a string read holds escapes.

// The fields of a plan: a mapping file's seven, then those Matrix's rules
// look at.
const (
	mRoom = iota
	mUser
	mTS
	mID
	mText
	mType
	mMentions
	mEnvelope    // Matrix: the envelope's type
	mStateKey    // Matrix: the state_key, whose membership a member event changes
	mMembership  // Matrix: content.membership
	mRelType     // Matrix: content["m.relates_to"].rel_type
	mRoomMention // Matrix: content["m.mentions"].room
	numFields
)

// mFieldNames name the fields in error messages. A member event's user
// is its state_key.
var mFieldNames = [numFields]string{"room", "user", "ts", "id", "text", "type", "mentions", "type", "user", "membership", "rel_type", "mentions"}

// Limits of a plan, so that its per-payload state has a fixed size.
const (
	maxSlots = 32  // pointers in all
	maxNodes = 256 // places in the payload that pointers pass through or end at
)

// mapping is what a plan is compiled from: for each field its pointers,
// in order of preference (the first that is present and not null is
// read).
type mapping struct {
	ptrs [numFields][]string
	unit tsUnit
	// kinds are the type values that are counted, and as what; absent,
	// if set, the kind of an event without a type (or a null one). Any
	// other type is ignored.
	kinds  map[string]chat.Kind
	absent *chat.Kind
	// rules, if set, decide the kind instead of kinds.
	rules rules
}

// rules are the rules of a chat system that decide what an event is where
// a mapping's type values cannot. A constant, not a func: a call through
// a func value would make every scan's state escape to the heap.
type rules uint8

const (
	noRules     rules = iota
	matrixRules       // see matrixKind
)

// plan is a compiled mapping.
type plan struct {
	spec     mapping // what it was compiled from
	nodes    []pnode // nodes[0] is the payload itself
	fields   [numFields][]uint8
	labels   []string // per slot, "room: /room_id": what its faults begin with
	missing  [numFields]string
	maxToken int // the longest token, in bytes
	unit     tsUnit
	kinds    map[string]chat.Kind
	absent   *chat.Kind
	rules    rules
}

// pnode is one place in the payload.
type pnode struct {
	key      string // the token that leads here from the parent, unescaped
	index    int    // the token as an array index; -1 when it is not one
	ptr      string // the pointer to here
	children []int32
	keys     bool    // some child is reached by an object key (any token is)
	indexes  bool    // some child is reached by an array index
	slots    []uint8 // the slots whose pointer ends here
}

// compile builds the plan of m.
func compile(m mapping) (*plan, error) {
	p := &plan{spec: m, nodes: []pnode{{index: -1}}, unit: m.unit, kinds: m.kinds, absent: m.absent, rules: m.rules}
	for f, ptrs := range m.ptrs {
		for _, ptr := range ptrs {
			tokens, err := parsePointer(ptr)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", mFieldNames[f], err)
			}
			if len(p.labels) == maxSlots {
				return nil, fmt.Errorf("%s: more than %d pointers in all", mFieldNames[f], maxSlots)
			}
			n := 0
			for _, tok := range tokens {
				if n, err = p.childFor(n, tok); err != nil {
					return nil, fmt.Errorf("%s: %v", mFieldNames[f], err)
				}
			}
			slot := uint8(len(p.labels))
			p.nodes[n].slots = append(p.nodes[n].slots, slot)
			p.fields[f] = append(p.fields[f], slot)
			p.labels = append(p.labels, mFieldNames[f]+": "+ptr)
		}
		if len(ptrs) > 0 {
			p.missing[f] = mFieldNames[f] + ": no value at " + strings.Join(ptrs, " or ")
		}
	}
	return p, nil
}

// childFor returns the child of node n reached by tok, adding it if need
// be.
func (p *plan) childFor(n int, tok string) (int, error) {
	for _, c := range p.nodes[n].children {
		if p.nodes[c].key == tok {
			return int(c), nil
		}
	}
	if len(p.nodes) == maxNodes {
		return 0, fmt.Errorf("the pointers pass through more than %d places", maxNodes)
	}
	c := len(p.nodes)
	p.nodes = append(p.nodes, pnode{key: tok, index: arrayIndex(tok), ptr: p.nodes[n].ptr + "/" + escapeToken(tok)})
	p.nodes[n].children = append(p.nodes[n].children, int32(c))
	p.nodes[n].keys = true
	p.nodes[n].indexes = p.nodes[n].indexes || p.nodes[c].index >= 0
	p.maxToken = max(p.maxToken, len(tok))
	return c, nil
}

// parsePointer splits a JSON pointer (RFC 6901) into its tokens,
// unescaped: "/a~1b/~0c/0" is ["a/b", "~c", "0"]. The pointer to the whole
// payload ("") names no field, and is refused.
func parsePointer(ptr string) ([]string, error) {
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("%q is not a JSON pointer: it must start with /", ptr)
	}
	if !utf8.ValidString(ptr) {
		return nil, fmt.Errorf("%q is not valid UTF-8", ptr)
	}
	tokens := strings.Split(ptr[1:], "/")
	if len(tokens) > MaxDepth {
		return nil, fmt.Errorf("%q is deeper than %d levels", ptr, MaxDepth)
	}
	for i, tok := range tokens {
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || tok[j+1] != '0' && tok[j+1] != '1') {
				return nil, fmt.Errorf("%q: ~ must be followed by 0 (for ~) or 1 (for /)", ptr)
			}
		}
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

func escapeToken(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// arrayIndex is tok as an array index (RFC 6901: 0, or digits without a
// leading zero), or -1.
func arrayIndex(tok string) int {
	if tok == "" || len(tok) > 1 && tok[0] == '0' || len(tok) > 9 {
		return -1
	}
	n, err := strconv.Atoi(tok)
	if err != nil || n < 0 || tok[0] == '+' || tok[0] == '-' {
		return -1
	}
	return n
}
