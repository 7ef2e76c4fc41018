package matrix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PowerLevels is a room's m.room.power_levels content: who may do what.
// A user's level is users[id], else users_default; an event needs
// events[type], else events_default (a message) or state_default (a
// state event); a redaction of another's event needs redact.
//
// It is read to be written back. Every key it does not change goes back
// exactly as it came, in its place: keys it does not know (ban, kick,
// notifications, a homeserver's own), and within users every level it
// did not set, even a numeric string. What it sets it writes as a
// number. So a mute changes one entry of users, and the undo that puts
// the entry back (or deletes it) leaves the content as it was.
//
// Levels are read as JSON integers or, as old room versions allow, as
// strings that hold one ("50", " 50 ", "+50"), as Dendrite reads them. A
// level of any other shape (50.5, "fifty", null) in a key it reads is an
// error rather than a guess: a guess could mute a moderator. Duplicate
// keys are an error for the same reason.
//
// The zero value is empty content: every level its default. A
// PowerLevels is not safe for concurrent use.
type PowerLevels struct {
	keys []entry // the top-level keys in order, values as they came; users' is rewritten by MarshalJSON

	users  []entry        // users in order; an entry with a nil value was set here
	levels map[string]int // users' levels, by id

	events                                         map[string]int
	usersDefault, eventsDefault, stateDefault, red optional
}

type entry struct {
	key   string
	value json.RawMessage
	level int // of a users entry
}

type optional struct {
	n   int
	set bool
}

func (o optional) or(d int) int {
	if o.set {
		return o.n
	}
	return d
}

// ParsePowerLevels reads the content of an m.room.power_levels event.
func ParsePowerLevels(content []byte) (*PowerLevels, error) {
	pl := new(PowerLevels)
	if err := pl.UnmarshalJSON(content); err != nil {
		return nil, err
	}
	return pl, nil
}

// UnmarshalJSON is ParsePowerLevels into pl.
func (pl *PowerLevels) UnmarshalJSON(content []byte) error {
	keys, err := object(content)
	if err != nil {
		return fmt.Errorf("power levels: %w", err)
	}
	p := PowerLevels{keys: keys}
	for _, k := range keys {
		var err error
		switch k.key {
		case "users":
			p.users, p.levels, err = levels(k.value)
		case "events":
			_, p.events, err = levels(k.value)
		case "users_default":
			p.usersDefault, err = readOptional(k.value)
		case "events_default":
			p.eventsDefault, err = readOptional(k.value)
		case "state_default":
			p.stateDefault, err = readOptional(k.value)
		case "redact":
			p.red, err = readOptional(k.value)
		}
		if err != nil {
			return fmt.Errorf("power levels: %s: %w", k.key, err)
		}
	}
	*pl = p
	return nil
}

// levels reads an object of levels (users, events): its entries in
// order, each with its level, and the levels by key.
func levels(b []byte) ([]entry, map[string]int, error) {
	entries, err := object(b)
	if err != nil {
		return nil, nil, err
	}
	byKey := make(map[string]int, len(entries))
	for i, e := range entries {
		n, err := level(e.value)
		if err != nil {
			return nil, nil, fmt.Errorf("%q: %w", e.key, err)
		}
		entries[i].level = n
		byKey[e.key] = n
	}
	return entries, byKey, nil
}

func readOptional(b []byte) (optional, error) {
	n, err := level(b)
	return optional{n, err == nil}, err
}

// level reads one power level: a JSON integer, or a string holding one.
func level(b []byte) (int, error) {
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return 0, err
		}
		s = strings.TrimSpace(s)
	}
	n, err := strconv.ParseInt(s, 10, strconv.IntSize)
	if err != nil {
		return 0, fmt.Errorf("%.40s is not a power level (an integer)", b)
	}
	return int(n), nil
}

// object reads a JSON object's keys in order, each value as it came.
func object(b []byte) ([]entry, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: %.40q", b)
	}
	var entries []entry
	seen := map[string]bool{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, err
		}
		key, ok := t.(string)
		if !ok { // Token would have said so first
			return nil, fmt.Errorf("a key that is not a string: %v", t)
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		entries = append(entries, entry{key: key, value: v})
	}
	if _, err := d.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	return entries, nil
}

// MarshalJSON writes the content back: every key as it came, in its
// place, but users, which holds what SetUser and DeleteUser left. A users
// the content did not have is added last, unless it is empty.
func (pl *PowerLevels) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	hadUsers := false
	for _, k := range pl.keys {
		if k.key == "users" {
			hadUsers = true
			pl.writeKey(&b, k.key, pl.writeUsers)
			continue
		}
		pl.writeKey(&b, k.key, func(b *bytes.Buffer) { b.Write(k.value) })
	}
	if !hadUsers && len(pl.users) > 0 {
		pl.writeKey(&b, "users", pl.writeUsers)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (pl *PowerLevels) writeKey(b *bytes.Buffer, key string, value func(*bytes.Buffer)) {
	if b.Len() > 1 {
		b.WriteByte(',')
	}
	k, _ := json.Marshal(key) // a string always marshals
	b.Write(k)
	b.WriteByte(':')
	value(b)
}

func (pl *PowerLevels) writeUsers(b *bytes.Buffer) {
	b.WriteByte('{')
	for i, u := range pl.users {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(u.key)
		b.Write(k)
		b.WriteByte(':')
		if u.value != nil {
			b.Write(u.value)
		} else {
			b.WriteString(strconv.Itoa(u.level))
		}
	}
	b.WriteByte('}')
}

// User is users[id]: the level set for the user, if one is.
func (pl *PowerLevels) User(id string) (level int, set bool) {
	level, set = pl.levels[id]
	return level, set
}

// UserLevel is the user's level: users[id], else users_default (0 if
// unset).
func (pl *PowerLevels) UserLevel(id string) int {
	if n, ok := pl.levels[id]; ok {
		return n
	}
	return pl.usersDefault.or(0)
}

// SetUser sets users[id] to level, in its place if the user had one,
// else last.
func (pl *PowerLevels) SetUser(id string, level int) {
	if pl.levels == nil {
		pl.levels = map[string]int{}
	}
	pl.levels[id] = level
	for i := range pl.users {
		if pl.users[i].key == id {
			pl.users[i] = entry{key: id, level: level}
			return
		}
	}
	pl.users = append(pl.users, entry{key: id, level: level})
}

// DeleteUser removes users[id]: the user's level is users_default again.
func (pl *PowerLevels) DeleteUser(id string) {
	if _, ok := pl.levels[id]; !ok {
		return
	}
	delete(pl.levels, id)
	for i := range pl.users {
		if pl.users[i].key == id {
			pl.users = append(pl.users[:i:i], pl.users[i+1:]...)
			return
		}
	}
}

// EventLevel is the level needed to send an event of type eventType:
// events[eventType], else events_default (0 if unset) for a message
// event, or state_default (50 if unset) for a state event.
func (pl *PowerLevels) EventLevel(eventType string, state bool) int {
	if n, ok := pl.events[eventType]; ok {
		return n
	}
	if state {
		return pl.stateDefault.or(50)
	}
	return pl.eventsDefault.or(0)
}

// Redact is the level needed to redact another user's event: redact (50
// if unset). It is also the level from which chatpulse counts a user as
// the room's moderator, never acted on.
func (pl *PowerLevels) Redact() int { return pl.red.or(50) }
