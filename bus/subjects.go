package bus

import (
	"fmt"
	"strconv"
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
	// ViewsPrefix starts the subject of each view's endpoint:
	// chatpulse.views.overview, and so on.
	ViewsPrefix = "chatpulse.views."
)

// PartitionPrefix starts the subject under which a group's chat stream
// files each event of --subject's chat.<room>.<user> form:
// _CP.<room partition>.<user partition>.<room>.<user>.
const PartitionPrefix = "_CP."

// PartitionTransform is the subject transform that files the events of
// subject (which must end in ".>") by partition: chat.<room>.<user> becomes
// _CP.<r>.<u>.<room>.<user>, r and u being FNV-1a of the room and user
// tokens mod partitions, as NATS computes {{partition(n,i)}}. An event on
// any other subject under subject is stored as it came.
func PartitionTransform(subject string, partitions int) (src, dest string, err error) {
	prefix, ok := strings.CutSuffix(subject, ">")
	if !ok || !strings.HasSuffix(prefix, ".") || strings.ContainsAny(prefix, "*") {
		return "", "", fmt.Errorf("--subject %q: a group needs one ending in .> with no other wildcard, such as chat.>", subject)
	}
	n := strconv.Itoa(partitions)
	return prefix + "*.*", PartitionPrefix + "{{partition(" + n + ",1)}}.{{partition(" + n + ",2)}}.{{wildcard(1)}}.{{wildcard(2)}}", nil
}

// Unfiled is the subject an event filed by partition was published on:
// _CP.<r>.<u>.<room>.<user> under subject chat.> was chat.<room>.<user>.
// Any other subject is returned as it is.
func Unfiled(filed, subject string) string {
	rest, ok := strings.CutPrefix(filed, PartitionPrefix)
	for i := 0; ok && i < 2; i++ { // the two partitions
		_, rest, ok = strings.Cut(rest, ".")
	}
	if !ok {
		return filed
	}
	return strings.TrimSuffix(subject, ">") + rest
}

// RoomPartition and UserPartition are the filter subjects of one
// partition's events, by room and by user.
func RoomPartition(p int) string { return PartitionPrefix + strconv.Itoa(p) + ".*.*.*" }
func UserPartition(p int) string { return PartitionPrefix + "*." + strconv.Itoa(p) + ".*.*" }

// AllPartitions is the filter subject of every partitioned event.
const AllPartitions = PartitionPrefix + ">"

// Moderators' actions (docs/contract.md section 11): the bucket that keeps
// those in force, and the audit trail of every change, on
// chatpulse.moderation.<kind>, kept in its stream.
const (
	ModerationBucket    = "CHATPULSE_MODERATION"
	ModerationPrefix    = "chatpulse.moderation."
	ModerationLogStream = "CHATPULSE_MODERATION_LOG"
	ModerationLogMaxAge = 30 * 24 * time.Hour
	// ActPrefix is where acts on the chat system, and their undos, are
	// published (docs/contract.md section 14): chatpulse.act.<kind>, kept
	// in ModerationLogStream too.
	ActPrefix = "chatpulse.act."
	// ActKeys are the keys of ModerationBucket that keep the undos of
	// acts due (unmute, unlock): act.<kind>.<names>. The rest are
	// moderators' actions.
	ActKeys = "act."
)

// SnapshotBucket is the object store that keeps the snapshots (contract
// section 9).
const SnapshotBucket = "CHATPULSE_SNAPSHOTS"

// Group subjects and buckets.
const (
	// GroupSettings is the key-value bucket of each group's settings.
	GroupSettings = "CHATPULSE_GROUPS"
)

// GroupLeases is the key-value bucket of a group's members and partition
// owners; GroupProgress, of how far each partition has been handled.
func GroupLeases(group string) string   { return "CHATPULSE_GROUP_" + group }
func GroupProgress(group string) string { return "CHATPULSE_GROUP_" + group + "_PROGRESS" }

// GroupQuery is where a member of a group answers the others' questions
// (token: the member's name as a subject token).
func GroupQuery(group, token string) string { return OwnPrefix + "group." + group + ".query." + token }

// overlapsOwn reports whether a subject filter matches some chatpulse.>
// subject.
func overlapsOwn(subject string) bool {
	first, _, _ := strings.Cut(subject, ".")
	return first == ">" || first == "*" || first+"." == OwnPrefix
}
