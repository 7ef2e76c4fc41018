package ingest

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/internal/yamlnode"
)

var mappingFields = []string{"room", "user", "ts", "id", "text", "type", "mentions", "message", "join", "leave"}

// ParseMapping parses a mapping file (docs/contract.md section 13, --input
// mapping:FILE): for a JSON payload, the JSON pointers (RFC 6901) of an
// event's fields, and which values of its type are a message, a join or
// a leave:
//
//	room: /channel_id
//	user: [/user_id, /user_name]      # the first present and not null
//	ts: {pointer: /timestamp, unit: ms}
//	id: /post_id
//	text: /text
//	mentions: /mentions               # an array of user names
//	type: /type
//	message: [post, null]             # null: no type, or a null one
//	join: [join]
//	leave: [leave]
//
// room and user are required. mentions points at an array of the user
// names the event mentions (docs/contract.md section 15); its string
// elements are read, anything else there is ignored. ts is optional (without it an event takes
// the time chatpulse received it) and has a unit: ms (integer Unix
// milliseconds), s (Unix seconds, a fraction allowed) or rfc3339; ms and
// s may be JSON numbers or strings holding one. Without type every event
// is a message; with it, message, join and leave list the values (strings,
// or numbers as written) that are counted, and any other is ignored. A
// pointer is one string or a list, tried in order. Unknown fields, a field
// given twice and a value listed twice are errors. An error names the
// file, the line and the field:
//
//	zulip.yaml:3: ts.unit: "sec" is not a unit (valid: ms, s, rfc3339)
//
// Names read through a mapping are 1..255 bytes, and may be integers
// (read as written); payloads are at most 64 KiB unless WithMaxPayload
// says otherwise.
func ParseMapping(file string, data []byte) (*Format, error) {
	fail := func(line int, field, format string, args ...any) (*Format, error) {
		return nil, fmt.Errorf("%s:%d: %s: %s", file, line, field, fmt.Sprintf(format, args...))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlnode.Error(file, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty file: want a mapping of room, user, ts, id, text, type...", file)
	}
	root := yamlnode.Deref(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of room, user, ts, id, text, type...", file, root.Line)
	}
	m := mapping{kinds: map[string]chat.Kind{}}
	lines := map[string]int{}
	fieldOf := map[string]int{"room": mRoom, "user": mUser, "ts": mTS, "id": mID, "text": mText, "type": mType, "mentions": mMentions}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := yamlnode.Deref(root.Content[i]), yamlnode.Deref(root.Content[i+1])
		field := k.Value
		if k.Kind != yaml.ScalarNode || !slices.Contains(mappingFields, field) {
			return fail(k.Line, field, "unknown field (valid: %s)", strings.Join(mappingFields, ", "))
		}
		if _, dup := lines[field]; dup {
			return fail(k.Line, field, "defined twice")
		}
		lines[field] = k.Line
		switch field {
		case "message", "join", "leave":
			kind := map[string]chat.Kind{"message": chat.KindMessage, "join": chat.KindJoin, "leave": chat.KindLeave}[field]
			items := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				items = v.Content
			}
			for _, item := range items {
				item = yamlnode.Deref(item)
				if item.Kind != yaml.ScalarNode {
					return fail(item.Line, field, "want type values: strings, numbers or null")
				}
				if item.ShortTag() == "!!null" {
					if m.absent != nil {
						return fail(item.Line, field, "null is listed twice")
					}
					m.absent = &kind
					continue
				}
				if _, dup := m.kinds[item.Value]; dup {
					return fail(item.Line, field, "%q is listed twice", item.Value)
				}
				m.kinds[item.Value] = kind
			}
		case "ts":
			ptrs := v
			if v.Kind == yaml.MappingNode {
				ptrs = nil
				for j := 0; j+1 < len(v.Content); j += 2 {
					kk, vv := yamlnode.Deref(v.Content[j]), yamlnode.Deref(v.Content[j+1])
					switch {
					case kk.Value == "pointer" && ptrs == nil:
						ptrs = vv
					case kk.Value == "unit" && m.unit == tsNative:
						units := map[string]tsUnit{"ms": tsMs, "s": tsSeconds, "rfc3339": tsRFC3339}
						u, ok := units[vv.Value]
						if vv.Kind != yaml.ScalarNode || !ok {
							return fail(vv.Line, "ts.unit", "%q is not a unit (valid: ms, s, rfc3339)", vv.Value)
						}
						m.unit = u
					case kk.Value == "pointer" || kk.Value == "unit":
						return fail(kk.Line, "ts."+kk.Value, "defined twice")
					default:
						return fail(kk.Line, "ts."+kk.Value, "unknown field (valid: pointer, unit)")
					}
				}
			}
			if ptrs == nil || m.unit == tsNative {
				return fail(v.Line, field, "want {pointer: /..., unit: ms, s or rfc3339}")
			}
			if err := pointers(ptrs, &m.ptrs[mTS]); err != "" {
				return fail(ptrs.Line, "ts.pointer", "%s", err)
			}
		default:
			if err := pointers(v, &m.ptrs[fieldOf[field]]); err != "" {
				return fail(v.Line, field, "%s", err)
			}
		}
	}
	for _, f := range []string{"room", "user"} {
		if _, ok := lines[f]; !ok {
			return fail(root.Line, f, "missing (room and user are required)")
		}
	}
	_, typed := lines["type"]
	listed := len(m.kinds) > 0 || m.absent != nil
	switch {
	case typed && !listed:
		return fail(lines["type"], "type", "no value is listed as a message, join or leave: nothing would be counted")
	case !typed && listed:
		for _, f := range []string{"message", "join", "leave"} {
			if line, ok := lines[f]; ok {
				return fail(line, f, "type values without a type pointer")
			}
		}
	}
	p, err := compile(m)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: %v", file, root.Line, err)
	}
	return &Format{name: "mapping:" + file, plan: p, maxName: chat.MaxForeignNameLen, maxPayload: MaxPayload}, nil
}

// pointers reads one pointer or a list of them into ptrs, checking each;
// it returns what is wrong, or "".
func pointers(n *yaml.Node, ptrs *[]string) string {
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
		if len(items) == 0 {
			return "want a JSON pointer or a list of them, got an empty list"
		}
	}
	for _, item := range items {
		item = yamlnode.Deref(item)
		if item.Kind != yaml.ScalarNode || item.ShortTag() != "!!str" {
			return "want a JSON pointer (a string such as /room) or a list of them"
		}
		if _, err := parsePointer(item.Value); err != nil {
			return err.Error()
		}
		*ptrs = append(*ptrs, item.Value)
	}
	return ""
}
