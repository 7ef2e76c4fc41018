package ingest

import (
	"slices"
	"strconv"

	"github.com/chatpulse/chatpulse/chat"
)

// matrixMapping reads the room events a Matrix homeserver publishes, as
// Dendrite v0.13 does on its stream DendriteOutputRoomEvent (contract
// section 13): an envelope {"type": ..., "new_room_event": {"event":
// {...}}} whose event is a Matrix client-server event.
var matrixMapping = mapping{
	ptrs: [numFields][]string{
		mRoom:        {"/new_room_event/event/room_id"},
		mUser:        {"/new_room_event/event/sender"},
		mTS:          {"/new_room_event/event/origin_server_ts"},
		mID:          {"/new_room_event/event/_event_id", "/new_room_event/event/event_id"},
		mText:        {"/new_room_event/event/content/body"},
		mType:        {"/new_room_event/event/type"},
		mEnvelope:    {"/type"},
		mStateKey:    {"/new_room_event/event/state_key"},
		mMembership:  {"/new_room_event/event/content/membership"},
		mRelType:     {"/new_room_event/event/content/m.relates_to/rel_type"},
		mMentions:    {"/new_room_event/event/content/m.mentions/user_ids"},
		mRoomMention: {"/new_room_event/event/content/m.mentions/room"},
	},
	unit:  tsMs,
	rules: matrixRules,
}

// synapseMapping reads the event of a Synapse spam check
// (docs/contract.md section 14): {"event": {...}}, the event in the
// client format v2 with its event_id, as the module synapse-http-antispam
// sends it to check_event_for_spam. No envelope: the rules are Matrix's
// all the same.
var synapseMapping = mapping{
	ptrs: [numFields][]string{
		mRoom:        {"/event/room_id"},
		mUser:        {"/event/sender"},
		mTS:          {"/event/origin_server_ts"},
		mID:          {"/event/event_id"},
		mText:        {"/event/content/body"},
		mType:        {"/event/type"},
		mStateKey:    {"/event/state_key"},
		mMembership:  {"/event/content/membership"},
		mRelType:     {"/event/content/m.relates_to/rel_type"},
		mMentions:    {"/event/content/m.mentions/user_ids"},
		mRoomMention: {"/event/content/m.mentions/room"},
	},
	unit:  tsMs,
	rules: matrixRules,
}

// matrixKind applies Matrix's rules, beyond where the fields are:
//   - only envelopes of type new_room_event carry new events; the others
//     (redacted_event, new_invite_event, retire_invite_event...) are
//     ignored (a mapping without an envelope reads the event alone);
//   - m.room.message is a message, unless it edits another
//     (content["m.relates_to"].rel_type m.replace) or is a state event
//     (it has a state_key: not a message a client shows);
//   - m.room.member with content.membership join or leave is a join or a
//     leave of the member it is about, its state_key (the sender but for
//     a kick, which the kicker sends); invites, bans and knocks are
//     ignored;
//   - everything else (m.room.redaction, m.reaction, state changes...) is
//     ignored. A redacted message stays counted: it was posted.
//
// A member event of a user already joined (a display name or avatar
// change) is a join here as well: only the room's membership, which the
// event does not carry, tells it apart, and the aggregator, which
// remembers each member's last join or leave, counts it nowhere
// (docs/contract.md section 12).
func matrixKind(d *mapper) (chat.Kind, bool, int) {
	if len(d.p.fields[mEnvelope]) > 0 && !d.is(mEnvelope, "new_room_event") {
		return 0, false, 0
	}
	switch {
	case d.is(mType, "m.room.message"):
		if d.has(mStateKey) || d.is(mRelType, "m.replace") {
			return 0, false, 0
		}
		return chat.KindMessage, true, mUser
	case d.is(mType, "m.room.member"):
		switch {
		case d.is(mMembership, "join"):
			return chat.KindJoin, true, mStateKey
		case d.is(mMembership, "leave"):
			return chat.KindLeave, true, mStateKey
		}
	}
	return 0, false, 0
}

// roomMention is how an event that mentions its whole room (Matrix's
// content["m.mentions"].room, @room) counts among the users it mentions
// (docs/contract.md section 15): as one more name, distinct from names.
// It is "@room", which no Matrix user id is, unless names holds that too
// (an event may say anything): then "@room 2", and so on.
func roomMention(names []string) string {
	in := func(s string) bool { return slices.Contains(names, s) }
	if len(names) > 16 { // the scan below would be quadratic
		set := make(map[string]bool, len(names))
		for _, n := range names {
			set[n] = true
		}
		in = func(s string) bool { return set[s] }
	}
	name := "@room"
	for n := 2; in(name); n++ {
		name = "@room " + strconv.Itoa(n)
	}
	return name
}
