package act

import (
	"context"
	"slices"
	"time"

	"github.com/chatpulse/chatpulse/matrix"
)

// A room is what the bot can do in one room where it had to act, as its
// power levels said when last read.
type room struct {
	missing []string  // the powers it lacks: redact, m.room.power_levels, m.room.join_rules
	checked time.Time // when its power levels were last read
}

// recheck is how long a room where the bot lacks a power is not asked
// again: its jobs that need that power fail at once meanwhile, and the
// lack is logged once.
const recheck = time.Minute

// powerLevels reads room's power levels, notes what the bot can do there,
// and returns them if the bot has power (redact, or an event type's) in
// it; errNoPower if it lacks it, without asking the homeserver again for
// a while.
func (a *Actor) powerLevels(ctx context.Context, name, power string) (*matrix.PowerLevels, error) {
	now := a.cfg.Now()
	a.mu.Lock()
	r := a.rooms[name]
	lacks := r != nil && slices.Contains(r.missing, power) && now.Sub(r.checked) < recheck
	a.mu.Unlock()
	if lacks {
		return nil, errNoPower
	}
	pl, err := a.cfg.Homeserver.PowerLevels(ctx, name)
	if matrix.Forbidden(err) { // not in the room, or it may not read it
		a.see(name, []string{"member"})
		return nil, errNoPower
	}
	if err != nil {
		return nil, err
	}
	bot, err := a.whoami(ctx)
	if err != nil {
		return nil, err
	}
	level := pl.UserLevel(bot)
	var missing []string
	if level < pl.Redact() {
		missing = append(missing, powerRedact)
	}
	for _, ev := range []string{evPowerLevels, evJoinRules} {
		if level < pl.EventLevel(ev, true) {
			missing = append(missing, ev)
		}
	}
	a.see(name, missing)
	if slices.Contains(missing, power) {
		return nil, errNoPower
	}
	return pl, nil
}

// see notes what the bot lacks in room, and logs when that changes.
func (a *Actor) see(name string, missing []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.rooms[name]
	if r == nil {
		r = &room{}
		a.rooms[name] = r
	}
	was := r.missing
	r.missing, r.checked = missing, a.cfg.Now()
	switch {
	case slices.Equal(was, missing):
	case len(missing) > 0:
		a.cfg.Log.Warn("act: the bot lacks power in a room: chatpulse does not act there what needs it", "room", name, "missing", missing)
	default:
		a.cfg.Log.Info("act: the bot has the power it needs in a room", "room", name)
	}
}

// whoami is the bot's user id, asked of the homeserver once.
func (a *Actor) whoami(ctx context.Context) (string, error) {
	a.mu.Lock()
	bot := a.bot
	a.mu.Unlock()
	if bot != "" {
		return bot, nil
	}
	bot, err := a.cfg.Homeserver.WhoAmI(ctx)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	a.bot = bot
	a.mu.Unlock()
	return bot, nil
}
