package bus

import (
	"strings"
	"time"
)

// Every subject, stream and header chatpulse itself uses (contract
// sections 1 and 5). Chat events come in on the configured --subject.
const (
	// OwnPrefix starts every subject of chatpulse's own; it never counts
	// a message published under it, whatever --subject says.
	OwnPrefix = "chatpulse."

	// DeadLetterPrefix starts the subject of each rejected event:
	// chatpulse.deadletter.<reason>.
	DeadLetterPrefix = "chatpulse.deadletter."
	DeadLetterStream = "CHATPULSE_DEADLETTER"
	DeadLetterMaxAge = 7 * 24 * time.Hour
	ErrorHeader      = "Chatpulse-Error"   // on a dead letter: what was wrong
	SubjectHeader    = "Chatpulse-Subject" // on a dead letter: where it was first published
	// OriginalHeaderPrefix renames the event's NATS headers on its dead
	// letter: Nats-Msg-Id becomes Chatpulse-Original-Nats-Msg-Id.
	OriginalHeaderPrefix = "Chatpulse-Original-"

	// AlertSubject carries throttle alerts.
	AlertSubject = "chatpulse.alerts.throttle"

	// The micro service and its throttle check endpoint.
	ServiceName    = "chatpulse"
	ServiceVersion = "0.1.0"
	CheckSubject   = "chatpulse.throttle.check"
)

// overlapsOwn reports whether a subject filter matches some chatpulse.>
// subject.
func overlapsOwn(subject string) bool {
	first, _, _ := strings.Cut(subject, ".")
	return first == ">" || first == "*" || first+"." == OwnPrefix
}
