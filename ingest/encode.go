package ingest

import (
	"strconv"

	"github.com/chatpulse/chatpulse/chat"
)

// FiledHeader marks a message that chatpulse filed in its own form
// (AppendNative) on its chat stream: what a group's filer files, and the
// events Synapse's checks allowed (docs/contract.md section 14). A
// Consumer reads such a message as Filed says, whatever its Format: a
// stream read as Matrix events carries chatpulse's own as well.
const FiledHeader = "Chatpulse-Filed"

// AppendNative appends ev as an event of chatpulse's own format
// (docs/contract.md section 1): room, user, ts (always written, as Unix
// milliseconds), type for a join or a leave, id, text and mentions when
// it has them (a Matrix room mention is one of its names: see
// roomMention). It is how a group files a foreign bus's events on
// chat.<room>.<user> (docs/contract.md section 13): decoded with their
// format, they are filed in this one, and Decode reads back the same
// Event. Its strings are valid UTF-8, as Decode leaves them.
func AppendNative(b []byte, ev Event) []byte {
	b = append(b, `{"room":`...)
	b = appendJSONString(b, ev.Room)
	b = append(b, `,"user":`...)
	b = appendJSONString(b, ev.User)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, ev.TS, 10)
	switch ev.Kind {
	case chat.KindJoin:
		b = append(b, `,"type":"join"`...)
	case chat.KindLeave:
		b = append(b, `,"type":"leave"`...)
	}
	if ev.ID != "" {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, ev.ID)
	}
	if ev.HasText {
		b = append(b, `,"text":`...)
		b = appendJSONString(b, ev.Text)
	}
	if len(ev.Mentions) > 0 {
		b = append(b, `,"mentions":[`...)
		for i, m := range ev.Mentions {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendJSONString appends s, valid UTF-8, as a JSON string: quotes,
// backslashes and control characters escaped, everything else as it is
// (no HTML escapes: a body of '<' stays one byte each).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Filed is how a group's partitions read the events it filed from f's
// (docs/contract.md section 13), and how a Consumer reads a message marked
// with FiledHeader: chatpulse's own format, with f's limits on names and
// payloads, since a Matrix id may run to 255 bytes.
func (f *Format) Filed() *Format {
	return &Format{name: f.name, maxName: f.maxName, maxPayload: f.maxPayload}
}
