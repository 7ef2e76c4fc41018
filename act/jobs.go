package act

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/matrix"
	"github.com/chatpulse/chatpulse/throttle"
)

// The event types whose power levels acting needs.
const (
	evMessage     = "m.room.message"
	evPowerLevels = "m.room.power_levels"
	evJoinRules   = "m.room.join_rules"
	powerRedact   = "redact" // not an event type: the power to redact others' events
)

// errNoPower: the bot lacks the power in the room (rooms.go): the job is
// not tried.
var errNoPower = errors.New("the bot lacks the power in this room")

// spare says why user is never acted on in a room with levels pl: "" if
// they may be.
func (a *Actor) spare(ctx context.Context, pl *matrix.PowerLevels, policy, user string) (string, error) {
	bot, err := a.whoami(ctx)
	switch {
	case err != nil:
		return "", err
	case user == bot:
		return "bot", nil
	case pl.UserLevel(user) >= pl.Redact():
		return "moderator", nil
	case a.exempt(policy, user):
		return "exempt", nil
	}
	return "", nil
}

// muteJob sets r.User's level in r.Room below what a message needs,
// keeping r (what was there, what it set) first.
func (a *Actor) muteJob(r *record) job {
	return job{kind: Mute, room: r.Room, user: r.User, power: evPowerLevels, do: func(ctx context.Context) (string, error) {
		pl, err := a.powerLevels(ctx, r.Room, evPowerLevels)
		if err != nil {
			return "", err
		}
		need := pl.EventLevel(evMessage, false)
		cur, had := pl.User(r.User)
		if r.Set != nil && had && strconv.Itoa(cur) == string(r.Set) {
			return "", nil // a try before this one went through: it is muted
		}
		why, err := a.spare(ctx, pl, r.Policy, r.User)
		if err != nil {
			return "", err
		}
		if why == "" && pl.UserLevel(r.User) < need {
			why = "unchanged" // it cannot post anyway
		}
		if why != "" {
			a.mu.Lock()
			a.skipped[r.key] = r.Due
			a.mu.Unlock()
			a.forget(ctx, r)
			a.publish(ctx, Act{Kind: Mute, Room: r.Room, User: r.User, Policy: r.Policy, Answered: r.Answered, Skipped: why})
			return "", errSkipped
		}
		a.mu.Lock()
		r.Prev = nil
		if had {
			r.Prev = json.RawMessage(strconv.Itoa(cur))
		}
		r.Set = json.RawMessage(strconv.Itoa(need - 1))
		r.Shadow = a.shadow()
		a.mu.Unlock()
		if err := a.keep(ctx, r); err != nil {
			return "", temporary(err)
		}
		ev := ""
		if !r.Shadow {
			pl.SetUser(r.User, need-1)
			if ev, err = a.cfg.Homeserver.SetPowerLevels(ctx, r.Room, pl); err != nil {
				return "", err
			}
		}
		return ev, nil
	}, done: func(ev string, err error) { a.made(r, Mute, ev, err) }}
}

// everywhereJob mutes o.User in every room where they posted within o's
// policy's window.
func (a *Actor) everywhereJob(part string, o throttle.Over) job {
	return job{kind: Mute, user: o.User, do: func(ctx context.Context) (string, error) {
		var rooms []string
		if a.cfg.Rooms != nil {
			rooms = a.cfg.Rooms(o.User, o.Window, o.At)
		}
		if o.EventRoom != "" && !slices.Contains(rooms, o.EventRoom) {
			rooms = append(rooms, o.EventRoom)
		}
		for _, room := range rooms {
			a.mute(part, o, room)
		}
		return "", errSkipped // each room's mute is a job of its own
	}, done: func(string, error) {}}
}

// lockJob sets r.Room's join rule to invite, keeping r (the join rules
// before) first.
func (a *Actor) lockJob(r *record) job {
	return job{kind: Lock, room: r.Room, power: evJoinRules, do: func(ctx context.Context) (string, error) {
		if _, err := a.powerLevels(ctx, r.Room, evJoinRules); err != nil {
			return "", err
		}
		content, err := a.cfg.Homeserver.JoinRules(ctx, r.Room)
		if err != nil {
			return "", err
		}
		rule := joinRule(content)
		if r.Set != nil && rule == "invite" {
			return "", nil // a try before this one went through
		}
		if rule == "invite" || rule == "private" {
			a.forget(ctx, r)
			a.publish(ctx, Act{Kind: Lock, Room: r.Room, Policy: r.Policy, Answered: r.Answered, Skipped: "unchanged"})
			return "", errSkipped
		}
		a.mu.Lock()
		r.Prev, r.Set, r.Shadow = content, json.RawMessage(`{"join_rule":"invite"}`), a.shadow()
		a.mu.Unlock()
		if err := a.keep(ctx, r); err != nil {
			return "", temporary(err)
		}
		if r.Shadow {
			return "", nil
		}
		return a.cfg.Homeserver.SetJoinRules(ctx, r.Room, r.Set)
	}, done: func(ev string, err error) { a.made(r, Lock, ev, err) }}
}

// made ends a mute's or a lock's job: done, the record is active (its
// undo due at Due) and the act published; not done, the record goes
// (what it kept, if anything, is undone at Due all the same: an undo
// finds nothing to put back where nothing was set).
func (a *Actor) made(r *record, kind Kind, ev string, err error) {
	ctx := context.Background()
	switch {
	case errors.Is(err, errSkipped):
		return
	case err != nil:
		a.mu.Lock()
		kept := r.rev != 0
		if kept {
			r.state = active
		} else if a.recs[r.key] == r {
			delete(a.recs, r.key)
		}
		a.mu.Unlock()
		failed := Act{Kind: kind, Room: r.Room, User: r.User, Policy: r.Policy, Answered: r.Answered}
		failed.fail(err)
		a.publish(ctx, failed)
		return
	}
	a.mu.Lock()
	r.Event, r.state = ev, active
	due := chat.Time(r.Due)
	a.mu.Unlock()
	if ev != "" {
		if err := a.keep(ctx, r); err != nil {
			a.cfg.Log.Warn("act: a record's event not kept", "key", r.key, "err", err)
		}
	}
	a.kick()
	a.publish(ctx, Act{Kind: kind, Room: r.Room, User: r.User, Policy: r.Policy, Answered: r.Answered, Event: ev, Until: &due, Shadow: r.Shadow})
}

// undoJob puts back what r set, if it is still there, and forgets r.
func (a *Actor) undoJob(r *record) job {
	kind := Unmute
	if r.Kind == Lock {
		kind = Unlock
	}
	power := evPowerLevels
	if r.Kind == Lock {
		power = evJoinRules
	}
	return job{kind: kind, room: r.Room, user: r.User, power: power, do: func(ctx context.Context) (string, error) {
		if r.Shadow {
			return "", nil
		}
		if r.Kind == Lock {
			return a.unlock(ctx, r)
		}
		return a.unmute(ctx, r)
	}, done: func(ev string, err error) {
		ctx := context.Background()
		a.forget(ctx, r)
		u := Act{Kind: kind, Room: r.Room, User: r.User, Policy: r.Policy, Answered: r.Answered, Event: ev, Shadow: r.Shadow}
		switch {
		case errors.Is(err, errUnchanged):
			u.Skipped = "unchanged"
		case err != nil:
			u.fail(err)
		}
		a.publish(ctx, u)
	}}
}

var (
	// errSkipped: the job found nothing to do, and said so itself.
	errSkipped = errors.New("skipped")
	// errUnchanged: an undo found what chatpulse set changed since.
	errUnchanged = errors.New("changed since by someone else: left as it is")
)

func (a *Actor) unmute(ctx context.Context, r *record) (string, error) {
	pl, err := a.powerLevels(ctx, r.Room, evPowerLevels)
	if err != nil {
		return "", err
	}
	cur, had := pl.User(r.User)
	if !had || strconv.Itoa(cur) != string(r.Set) {
		return "", errUnchanged
	}
	if r.Prev == nil {
		pl.DeleteUser(r.User)
	} else {
		prev, err := strconv.Atoi(string(r.Prev))
		if err != nil {
			return "", err
		}
		pl.SetUser(r.User, prev)
	}
	return a.cfg.Homeserver.SetPowerLevels(ctx, r.Room, pl)
}

func (a *Actor) unlock(ctx context.Context, r *record) (string, error) {
	if _, err := a.powerLevels(ctx, r.Room, evJoinRules); err != nil {
		return "", err
	}
	content, err := a.cfg.Homeserver.JoinRules(ctx, r.Room)
	if err != nil {
		return "", err
	}
	if joinRule(content) != joinRule(r.Set) {
		return "", errUnchanged
	}
	return a.cfg.Homeserver.SetJoinRules(ctx, r.Room, r.Prev)
}

// redactJob redacts the message of o, unless its sender is spared.
func (a *Actor) redactJob(o throttle.Over) job {
	return job{kind: Redact, room: o.EventRoom, user: o.EventUser, power: powerRedact, do: func(ctx context.Context) (string, error) {
		pl, err := a.powerLevels(ctx, o.EventRoom, powerRedact)
		if err != nil {
			return "", err
		}
		if why, err := a.spare(ctx, pl, o.Policy, o.EventUser); err != nil || why != "" {
			if err == nil {
				a.m.acted(Redact, "skipped")
				err = errSkipped
			}
			return "", err
		}
		if a.shadow() {
			return "", nil
		}
		sum := sha256.Sum256([]byte(o.EventRoom + "\x00" + o.Event))
		txn := "chatpulse-" + base64.RawURLEncoding.EncodeToString(sum[:12])
		return a.cfg.Homeserver.Redact(ctx, o.EventRoom, o.Event, "chatpulse: policy "+o.Policy, txn)
	}, done: func(ev string, err error) {
		if errors.Is(err, errSkipped) {
			return
		}
		act := Act{Kind: Redact, Room: o.EventRoom, User: o.EventUser, Policy: o.Policy, Answered: []string{o.Event}, Event: ev, Shadow: a.shadow()}
		if err != nil {
			act.fail(err)
		}
		a.publish(context.Background(), act)
	}}
}

// joinRule is the join_rule of join rules content.
func joinRule(content json.RawMessage) string {
	var c struct {
		JoinRule string `json:"join_rule"`
	}
	json.Unmarshal(content, &c)
	return c.JoinRule
}

// fail says in act why its job did not change anything: the bot lacks
// the power (skipped, no_power), or err (failed).
func (act *Act) fail(err error) {
	if errors.Is(err, errNoPower) || matrix.Forbidden(err) {
		act.Skipped = "no_power"
		return
	}
	act.Skipped, act.Error = "failed", err.Error()
}
