package act

import (
	"context"
	"sync"
)

// A job is one change to make on the homeserver: an act or an undo.
type job struct {
	kind Kind
	room string
	user string // mute, unmute
	// power is what the bot needs in room for it: redact, or the event
	// type it sends (a 403 says the bot lacks it).
	power string
	// do makes the change and returns the id of the event it produced
	// ("" if it found nothing to change).
	do func(ctx context.Context) (string, error)
	// done is told how it ended: the event produced, or the error that
	// ended it (nil: it found nothing to change).
	done func(event string, err error)
}

// A queue holds the jobs waiting for the homeserver: at most max of
// them, in two lines. Mutes, locks and every undo go first; redactions
// wait until that line is empty. A full queue makes room by dropping a
// redaction, the newest first; with no redaction to drop, it refuses the
// job. An undo is never refused: each one is a record kept in the bucket,
// so their number is bounded by the policies, not by the traffic.
type queue struct {
	mu      sync.Mutex
	max     int
	first   []job // mutes, locks, undos
	redact  []job
	dropped map[Kind]uint64
	onDrop  func(Kind)    // told of each job dropped; nil: none
	wake    chan struct{} // something was pushed
}

func newQueue(max int) *queue {
	return &queue{max: max, dropped: map[Kind]uint64{}, wake: make(chan struct{}, 1)}
}

// push adds j, and reports whether it was taken (else it was dropped
// and counted).
func (q *queue) push(j job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	undo := j.kind == Unmute || j.kind == Unlock
	if !undo && len(q.first)+len(q.redact) >= q.max {
		if j.kind == Redact || len(q.redact) == 0 {
			q.drop(j.kind)
			return false
		}
		last := len(q.redact) - 1
		q.drop(Redact)
		q.redact[last] = job{}
		q.redact = q.redact[:last]
	}
	if j.kind == Redact {
		q.redact = append(q.redact, j)
	} else {
		q.first = append(q.first, j)
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// drop counts a job of kind k dropped; q.mu is held.
func (q *queue) drop(k Kind) {
	q.dropped[k]++
	if q.onDrop != nil {
		q.onDrop(k)
	}
}

// pop takes the next job, waiting for one until ctx is done.
func (q *queue) pop(ctx context.Context) (job, bool) {
	for {
		q.mu.Lock()
		line := &q.first
		if len(*line) == 0 {
			line = &q.redact
		}
		if len(*line) > 0 {
			j := (*line)[0]
			(*line)[0] = job{}
			*line = (*line)[1:]
			q.mu.Unlock()
			return j, true
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			return job{}, false
		}
	}
}

// waiting is how many jobs wait, and how many of each kind were dropped.
func (q *queue) waiting() (n int, dropped map[Kind]uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := make(map[Kind]uint64, len(q.dropped))
	for k, v := range q.dropped {
		d[k] = v
	}
	return len(q.first) + len(q.redact), d
}
