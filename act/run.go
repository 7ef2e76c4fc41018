package act

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/matrix"
)

// Run makes the changes queued, and the undos when due, until ctx is
// done.
func (a *Actor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { a.greet(ctx) })
	wg.Go(func() { a.work(ctx) })
	a.schedule(ctx)
	wg.Wait()
}

// greet asks the homeserver who the bot is, until it answers: a
// homeserver that does not answer at start is said so once, and asked
// again every few seconds meanwhile (the jobs ask it too, and wait).
func (a *Actor) greet(ctx context.Context) {
	for failed := false; ; {
		bot, err := a.whoami(ctx)
		switch {
		case err == nil && failed:
			a.cfg.Log.Info("act: the homeserver answers", "bot", bot)
			return
		case err == nil:
			a.cfg.Log.Info("act: acting on the homeserver", "bot", bot, "mode", a.cfg.Mode)
			return
		case !failed:
			a.cfg.Log.Warn("act: the homeserver does not answer; chatpulse runs and asks again", "err", err)
			failed = true
		}
		if pause(ctx, 5*time.Second) {
			return
		}
	}
}

// work makes the queued changes one after the other: two changes of one
// room's power levels never race.
func (a *Actor) work(ctx context.Context) {
	for {
		j, ok := a.q.pop(ctx)
		if !ok {
			return
		}
		a.run(ctx, j)
	}
}

// Backoff of a change the homeserver failed for a while (a network
// error, a 5xx): from backoffMin, doubling, to backoffMax.
const (
	backoffMin = 500 * time.Millisecond
	backoffMax = 30 * time.Second
)

// run makes one change: it waits out the homeserver's rate limit, tries
// again after a network error or a 5xx (with backoff: the queue waits
// meanwhile, and fills), and gives up on anything else: a room where the
// bot lacks the power is noted, not tried again in a loop.
func (a *Actor) run(ctx context.Context, j job) {
	backoff := backoffMin
	for {
		ev, err := j.do(ctx)
		var tmp *tempError
		switch {
		case err == nil || errors.Is(err, errSkipped) || errors.Is(err, errUnchanged) || errors.Is(err, errNoPower):
		case ctx.Err() != nil:
			err = ctx.Err()
		default:
			if d, limited := matrix.RetryAfter(err); limited {
				a.m.limited.Inc()
				if !pause(ctx, max(d, 100*time.Millisecond)) {
					continue
				}
				err = ctx.Err()
				break
			}
			if matrix.Temporary(err) || errors.As(err, &tmp) {
				a.cfg.Log.Warn("act: the homeserver failed a change; trying again", "kind", j.kind, "room", j.room, "in", backoff, "err", err)
				if !pause(ctx, backoff) {
					backoff = min(2*backoff, backoffMax)
					continue
				}
				err = ctx.Err()
				break
			}
			if matrix.Forbidden(err) && j.power != "" {
				a.see(j.room, []string{j.power})
			}
			a.cfg.Log.Warn("act: a change not made", "kind", j.kind, "room", j.room, "err", err)
		}
		j.done(ev, err)
		return
	}
}

// pause waits d; true if ctx was done first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-ctx.Done():
		return true
	}
}

// A tempError is a failure of chatpulse's own side (the bucket) that is
// worth trying again, as a homeserver's 5xx is.
type tempError struct{ err error }

func (e *tempError) Error() string { return e.err.Error() }
func (e *tempError) Unwrap() error { return e.err }

func temporary(err error) error { return &tempError{err} }

// schedule queues each undo when it is due, if this instance holds its
// part, and keeps the records whose undo moved later; until ctx is done.
// It looks again when the records change, when the next is due, and
// every second while one is overdue that another instance holds (it may
// die, and this one take its part over: the undo is then done here).
func (a *Actor) schedule(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.wake:
		}
		now := a.cfg.Now().UnixMilli()
		next := now + time.Minute.Milliseconds()
		var moved []*record
		a.mu.Lock()
		maps.DeleteFunc(a.skipped, func(_ string, until int64) bool { return until <= now })
		for _, r := range a.recs {
			if r.dirty && r.rev != 0 {
				moved = append(moved, r)
			}
			if r.state != active || r.Due == 0 {
				continue // not made yet, being undone, or a timeout until lifted
			}
			if r.Due > now {
				next = min(next, r.Due)
				continue
			}
			if !a.cfg.Owns(r.Part) {
				next = min(next, now+time.Second.Milliseconds())
				continue
			}
			r.state = undoing
			a.q.push(a.undoJob(r))
		}
		a.mu.Unlock()
		for _, r := range moved {
			if err := a.keep(ctx, r); err != nil {
				a.cfg.Log.Warn("act: a record's later undo not kept", "key", r.key, "err", err)
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(time.Duration(next-a.cfg.Now().UnixMilli()) * time.Millisecond)
	}
}

// publish publishes act on chatpulse.act.<kind>, under an id that names
// it (so that the audit stream keeps it once), and counts it.
func (a *Actor) publish(ctx context.Context, act Act) {
	act.At = chat.Time(a.cfg.Now().UnixMilli())
	result := "done"
	switch {
	case act.Error != "":
		result = "failed"
	case act.Skipped != "":
		result = "skipped"
	case act.Shadow:
		result = "shadow"
	}
	a.m.acted(act.Kind, result)
	if a.cfg.Publish == nil {
		return
	}
	data, _ := json.Marshal(act)
	id := string(act.Kind) + "|" + strconv.Quote(act.Room) + "|" + strconv.Quote(act.User) + "|" + act.Policy + "|" + act.Event
	if len(act.Answered) > 0 {
		id += "|" + act.Answered[0]
	}
	if act.Event == "" {
		id += "|" + strconv.FormatInt(int64(act.At), 10)
	}
	if err := a.cfg.Publish(ctx, string(act.Kind), id, data); err != nil {
		a.cfg.Log.Warn("act: an act not published", "kind", act.Kind, "room", act.Room, "err", err)
	}
}
