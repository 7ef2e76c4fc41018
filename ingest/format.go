package ingest

import (
	"fmt"
	"os"
	"strings"

	"github.com/chatpulse/chatpulse/chat"
)

// Default payload limits of the formats (docs/contract.md sections 1 and 13).
const (
	// MaxMatrixPayload: Matrix events run to hundreds of KiB (a body of
	// '<' characters escapes to six bytes each).
	MaxMatrixPayload = 1 << 20
	// MaxPayloadLimit is the most any format may be set to read.
	MaxPayloadLimit = 64 << 20
)

// A Format is how the payloads of one input are read (docs/contract.md section
// 13, --input): chatpulse's own events (Native), the room events of a
// Matrix homeserver (Matrix) or any JSON through a mapping file
// (ParseMapping). There is one decoder: the scanner, and what a field
// makes of its value, are the same for all; the native format reads its
// fixed fields where it meets them, the others through their JSON
// pointers (see mapping.go). A Format is immutable and safe for
// concurrent use.
type Format struct {
	name       string
	plan       *plan // nil: the native front end
	maxName    int
	maxPayload int
}

var (
	native  = &Format{name: "chatpulse", maxName: chat.MaxNameLen, maxPayload: MaxPayload}
	matrix  = mustFormat("matrix", matrixMapping, MaxMatrixPayload)
	synapse = mustFormat("synapse", synapseMapping, MaxMatrixPayload)
)

func mustFormat(name string, m mapping, maxPayload int) *Format {
	p, err := compile(m)
	if err != nil {
		panic(err)
	}
	return &Format{name: name, plan: p, maxName: chat.MaxForeignNameLen, maxPayload: maxPayload}
}

// Native is chatpulse's own format, docs/contract.md section 1: see Decode.
func Native() *Format { return native }

// Matrix reads the room events of a Matrix homeserver as Dendrite
// publishes them (see matrixKind), payloads of up to 1 MiB, names of up
// to 255 bytes.
func Matrix() *Format { return matrix }

// SynapseEvent reads what Synapse asks about an event through the module
// synapse-http-antispam (docs/contract.md section 14): {"event": {...}},
// the event in the client format v2 with its event_id, by the rules of
// Matrix (see matrixKind): a message, a join or a leave, or ignored.
// Payloads of up to 1 MiB, names of up to 255 bytes. It is no --input.
func SynapseEvent() *Format { return synapse }

// ParseInput reads --input: chatpulse, matrix or mapping:FILE.
func ParseInput(spec string) (*Format, error) {
	switch {
	case spec == "chatpulse":
		return native, nil
	case spec == "matrix":
		return matrix, nil
	case strings.HasPrefix(spec, "mapping:"):
		file := strings.TrimPrefix(spec, "mapping:")
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("mapping: %w", err)
		}
		return ParseMapping(file, data)
	}
	return nil, fmt.Errorf("%q: want chatpulse, matrix or mapping:FILE", spec)
}

// Name is how --input names the format; nil is chatpulse's own.
func (f *Format) Name() string {
	if f == nil {
		return native.name
	}
	return f.name
}

// Native reports whether f is chatpulse's own format.
func (f *Format) Native() bool { return f.plan == nil }

// MaxPayload is the largest payload f reads; longer ones are too_large.
func (f *Format) MaxPayload() int { return f.maxPayload }

// MaxName is the longest room or user name f accepts, in bytes; nil is
// chatpulse's own.
func (f *Format) MaxName() int {
	if f == nil {
		return native.maxName
	}
	return f.maxName
}

// WithMaxPayload is f reading payloads of up to n bytes
// (--max-event-bytes). Chatpulse's own events are at most 64 KiB by
// docs/contract.md section 1, whatever n says.
func (f *Format) WithMaxPayload(n int) (*Format, error) {
	switch {
	case f.plan == nil && n != MaxPayload:
		return nil, fmt.Errorf("chatpulse's own events are at most %d bytes (docs/contract.md section 1); a limit of %d is for --input matrix or mapping:FILE", MaxPayload, n)
	case n < 1 || n > MaxPayloadLimit:
		return nil, fmt.Errorf("%d is out of range (1 to %d bytes)", n, MaxPayloadLimit)
	}
	g := *f
	g.maxPayload = n
	return &g, nil
}

// Decode decodes and validates one payload of f, in a single pass over
// data (see Decode for the native format, and mapping.go for the others).
// On error the Event is the zero Event, as it is for an event of a kind
// the counters do not take (Counted false) read through a mapping. The
// error is an *Error, not an error, so that callers read its Reason
// without a type assertion.
func (f *Format) Decode(data []byte, now, maxSkewMs int64) (Event, *Error) {
	if len(data) > f.maxPayload {
		return Event{}, tooLarge(len(data), f.maxPayload)
	}
	if f.plan == nil {
		return decodeNative(data, f.maxName, now, maxSkewMs)
	}
	return f.plan.decode(data, f.maxName, now, maxSkewMs)
}
