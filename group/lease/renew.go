package lease

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/chatpulse/chatpulse/bus"
)

// tick rewrites our keys, every ttl/4: the member key, then the
// partitions' keys, deciding which partitions to stop by the clock read
// after the member key's write.
func (l *Loop) tick(ctx context.Context) {
	l.beat(ctx)
	l.renew(ctx, l.clock())
}

// beat rewrites our member key.
func (l *Loop) beat(ctx context.Context) {
	if l.lag != nil {
		l.self.Lag = l.lag()
	}
	if l.stamp != nil {
		l.self.Clock = l.stamp().UnixMilli()
	}
	value, _ := json.Marshal(l.self)
	ctx, cancel := context.WithTimeout(ctx, l.WriteTimeout())
	defer cancel()
	if _, err := l.kv.Put(ctx, memberKey+l.self.Instance, value); err != nil {
		l.log.Warn("group: member key not renewed", "err", err)
		l.failed = l.clock()
	}
}

// renew rewrites the keys of the partitions we hold, all at once, within
// one writeTimeout: one slow write holds up none of the others. A
// partition whose key was changed by someone else is lost: stopped at
// once; so is one we could not renew whose lease had run out by now, and
// one whose renewal came back after its lease ran out.
func (l *Loop) renew(ctx context.Context, now time.Time) {
	wctx, cancel := context.WithTimeout(ctx, l.WriteTimeout())
	defer cancel()
	type renewal struct {
		p    int
		rev  uint64
		sent time.Time
		err  error
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		done []renewal
	)
	for p, h := range l.mine {
		ready, last := h.caughtUp, h.rev
		wg.Go(func() {
			rev, sent, err := l.writeOwner(wctx, p, ready, last)
			mu.Lock()
			done = append(done, renewal{p, rev, sent, err})
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(done, func(a, b renewal) int { return a.p - b.p })
	back := l.clock()
	for _, r := range done {
		p, h := r.p, l.mine[r.p]
		switch err := r.err; {
		case err == nil && back.Before(h.validUntil):
			h.rev, h.ready = r.rev, h.caughtUp
			l.extend(p, h, r.sent)
		case err == nil:
			l.log.Warn("group: lost partition: renewed after its lease ran out", "partition", p)
			h.rev = r.rev
			l.release(ctx, p, true)
		case errors.Is(err, bus.ErrKeyChanged) || now.After(h.validUntil):
			l.log.Warn("group: lost partition", "partition", p, "err", err)
			if !errors.Is(err, bus.ErrKeyChanged) {
				l.failed = back
			}
			l.drop(p, true)
		default:
			l.log.Warn("group: partition lease not renewed", "partition", p, "err", err)
			l.failed = back
		}
	}
	l.publish() // before the validity readers know runs out
}

// extend makes partition p valid for a lease from sent, and sets its
// validity timer to stop it then.
func (l *Loop) extend(p int, h *held, sent time.Time) {
	h.validUntil = l.until(sent)
	if h.expiry != nil {
		h.expiry()
	}
	claim := h.claim
	h.expiry = l.after(h.validUntil.Sub(l.clock()), func() { l.Expire(p, claim) })
}

// writeOwner writes partition p's key as ours, if its revision is still
// rev (0: if it does not exist), and returns the new revision and when
// the write was sent.
func (l *Loop) writeOwner(ctx context.Context, p int, ready bool, rev uint64) (uint64, time.Time, error) {
	sent := l.clock()
	value, _ := json.Marshal(Owner{Instance: l.self.Instance, Ready: ready})
	key := ownerKey + strconv.Itoa(p)
	var err error
	if rev == 0 {
		rev, err = l.kv.Create(ctx, key, value)
	} else {
		rev, err = l.kv.Update(ctx, key, value, rev)
	}
	return rev, sent, err
}

// balance releases the partitions that should now be another member's and
// claims those that should be ours and are free. Once a claim finds the
// bucket not answering, it claims no more this turn: each would hold the
// loop up for a write's deadline.
func (l *Loop) balance(ctx context.Context) {
	away := false
	for p := range l.partitions {
		want := l.wants(p)
		h := l.mine[p]
		switch {
		case h != nil && !want:
			l.release(ctx, p, false)
		case h == nil && want:
			if _, taken := l.owners[p]; taken || away {
				continue // its holder releases it, or its lease runs out
			}
			rev, sent, err := l.write(ctx, p, false, 0)
			switch {
			case err == nil:
			case errors.Is(err, bus.ErrKeyChanged): // someone was quicker: the watch will say who
				l.log.Debug("group: partition claimed by another first", "partition", p)
				continue
			case ctx.Err() != nil: // leaving
				continue
			default: // tried again at the next turn
				l.log.Warn("group: partition not claimed", "partition", p, "err", err)
				l.failed, away = l.clock(), true
				continue
			}
			h = &held{claim: rev, rev: rev}
			l.mine[p] = h
			l.extend(p, h, sent)
			l.owners[p] = Owner{Instance: l.self.Instance}
			l.log.Info("group: partition claimed", "partition", p)
			l.publish() // the partition acts only while readers see it held
			l.hand.Start(p, rev)
		case h != nil && h.caughtUp && !h.ready:
			rev, sent, err := l.write(ctx, p, true, h.rev)
			switch {
			case err == nil && l.clock().Before(h.validUntil):
				h.rev, h.ready = rev, true
				l.extend(p, h, sent)
				l.owners[p] = Owner{Instance: l.self.Instance, Ready: true}
			case err == nil || errors.Is(err, bus.ErrKeyChanged):
				l.log.Warn("group: lost partition", "partition", p, "err", err)
				h.rev = rev
				l.release(ctx, p, true)
			default: // said again at the next turn, or at the next renewal
				l.log.Warn("group: partition not said to be ready", "partition", p, "err", err)
			}
		}
	}
}

// write is writeOwner on its own, within writeTimeout.
func (l *Loop) write(ctx context.Context, p int, ready bool, rev uint64) (uint64, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, l.WriteTimeout())
	defer cancel()
	return l.writeOwner(ctx, p, ready, rev)
}

// until is how long a lease written at sent lets us answer as owner.
func (l *Loop) until(sent time.Time) time.Time { return sent.Add(l.ttl * 3 / 4) }

// wants reports whether rendezvous hashing gives partition p to this
// member, among the members the loop knows to be live.
func (l *Loop) wants(p int) bool {
	live := make([]string, 0, len(l.members)+len(l.vanished)+1)
	for name := range l.members {
		live = append(live, name)
	}
	now := l.clock()
	for name, at := range l.vanished {
		if now.Sub(at) < l.ttl {
			live = append(live, name)
		}
	}
	if !slices.Contains(live, l.self.Instance) {
		live = append(live, l.self.Instance) // we are live whatever the watch has seen yet
	}
	return OwnerOf(p, live) == l.self.Instance
}

// vanish notes that member name's key is gone. If that is within a lease
// of a write of ours failing for want of the bucket, the bucket is more
// likely to have been away (a NATS node lost, its leader being elected
// again: longer than a lease) than the member dead: its key ran out as
// ours did. It is counted live for a lease more, so that it gets its own
// partitions back, resumed from the state it kept (Member parks it),
// rather than have another member claim them and rebuild them, only to
// give them back once it writes its key again. A member that did die
// then is taken over a lease later.
func (l *Loop) vanish(name string) {
	if now := l.clock(); !l.failed.IsZero() && now.Sub(l.failed) < l.ttl {
		l.vanished[name] = now
	}
}

// release stops partition p and gives up its lease; lost as hand.stop's.
func (l *Loop) release(ctx context.Context, p int, lost bool) {
	rev := l.mine[p].rev
	l.drop(p, lost)
	ctx, cancel := context.WithTimeout(ctx, l.WriteTimeout())
	defer cancel()
	if err := l.kv.Delete(ctx, ownerKey+strconv.Itoa(p), rev); err != nil {
		l.log.Warn("group: partition not released (its lease runs out instead)", "partition", p, "err", err)
	}
	l.log.Info("group: partition released", "partition", p)
}

// drop stops partition p and forgets that we hold it, and says so to
// readers at once: before anyone can learn that the lease is free.
func (l *Loop) drop(p int, lost bool) {
	h := l.mine[p]
	if h.expiry != nil {
		h.expiry()
	}
	l.hand.Stop(p, h.claim, lost)
	delete(l.mine, p)
	delete(l.owners, p)
	l.publish()
}

// leave releases everything and removes our member key, so that the
// others take over at once rather than after the lease; each write within
// writeTimeout.
func (l *Loop) leave() {
	ctx := context.Background()
	for p := range l.mine {
		l.release(ctx, p, false)
	}
	ctx, cancel := context.WithTimeout(ctx, l.WriteTimeout())
	defer cancel()
	if err := l.kv.Delete(ctx, memberKey+l.self.Instance, 0); err != nil {
		l.log.Warn("group: member key not removed (it runs out instead)", "err", err)
	}
	l.publish()
}

// publish makes the loop's state visible to readers.
func (l *Loop) publish() {
	now := l.clock()
	maps.DeleteFunc(l.vanished, func(_ string, at time.Time) bool { return now.Sub(at) >= l.ttl })
	t := &Table{Synced: l.synced, Members: maps.Clone(l.members), Owners: maps.Clone(l.owners), Mine: make(map[int]Grant, len(l.mine)), Failed: l.failed}
	for p, h := range l.mine {
		t.Mine[p] = Grant{Claim: h.claim, Until: h.validUntil}
	}
	for p := range l.partitions {
		if l.wants(p) {
			t.Wants = append(t.Wants, p)
		}
	}
	l.pub.Store(t)
	l.logSkew(t)
}
