package web

import "bytes"

// How the hub gets views computed without computing them itself: it
// queues render jobs, renderer goroutines take them and send them back
// with the versions that changed, and the hub applies those. A job is
// either a new view's first version (someone waits for it: these go first)
// or a batch of a push. A push starts only when every batch of the last
// one is back, and a view with a job out is in no other job, so the
// versions of a view reach the hub in the order they were computed.
//
// Clients given versions during a push are woken when its last batch is
// applied, with the push's feeds, so that each writes everything the push
// brought it at once; they are woken a batch at a time (wake.go).

// renderFunc computes a view. last is the version pushed last (without a
// frame if none was); when render can tell without computing that the
// view is still last, it answers a rendering without a frame.
type renderFunc func(k viewKey, last rendering) (rendering, error)

// A rendering is one computed version of a view.
type rendering struct {
	frame []byte // the view frame, as sent
	stamp []byte // its data without as_of, to tell a change
	// quiet: the view of a room without messages, which Views can say
	// stays so until a message comes (the optional RoomActivity).
	quiet bool
}

// A renderJob is views for a renderer to compute.
type renderJob struct {
	first bool // new views, which nobody has had a version of
	items []renderItem
}

// renderItem is one view of a job. The renderer reads key and last and
// writes next, changed and err; only the hub touches v.
type renderItem struct {
	v       *watched
	key     viewKey
	last    rendering
	next    rendering
	changed bool // next is a new version to push
	err     error
}

// renderQueue is the hub's jobs that no renderer has taken yet.
type renderQueue struct {
	firsts  []*watched   // views waiting for their first version
	batches []*renderJob // the current push's batches not yet taken
	next    *renderJob   // the job being offered to the renderers
	out     int          // batches of the current push not yet applied
	touched []*client    // clients given a version during this push
}

// first queues a new view's first version.
func (q *renderQueue) first(v *watched) {
	v.busy = true
	q.firsts = append(q.firsts, v)
}

// offer returns the channel and the job for the hub's select: the renderers'
// channel and the next job, or nil (a case that never fires) if there is
// none.
func (q *renderQueue) offer(jobs chan *renderJob) (chan<- *renderJob, *renderJob) {
	for q.next == nil {
		switch {
		case len(q.firsts) > 0:
			q.next = q.takeFirsts()
		case len(q.batches) > 0:
			q.next = q.batches[0]
			q.batches = q.batches[1:]
		default:
			return nil, nil
		}
	}
	return jobs, q.next
}

// takeFirsts makes a job of the next new views that someone still
// watches; nil if none of them is.
func (q *renderQueue) takeFirsts() *renderJob {
	n := min(len(q.firsts), passBatch)
	j := &renderJob{first: true, items: make([]renderItem, 0, n)}
	for _, v := range q.firsts[:n] {
		if len(v.watchers) == 0 {
			v.busy = false // its watchers left before it was computed
			continue
		}
		j.items = append(j.items, renderItem{v: v, key: v.key})
	}
	clear(q.firsts[:n])
	if q.firsts = q.firsts[n:]; len(q.firsts) == 0 {
		q.firsts = nil // let the backing array go
	}
	if len(j.items) == 0 {
		return nil
	}
	return j
}

// taken notes that a renderer took the offered job.
func (q *renderQueue) taken() { q.next = nil }

// renderer computes the jobs it takes until the hub stops.
func (h *hub) renderer() {
	for {
		var j *renderJob
		select {
		case j = <-h.jobs:
		case <-h.stopped:
			return
		}
		for i := range j.items {
			it := &j.items[i]
			it.next, it.err = h.render(it.key, it.last)
			it.changed = it.err == nil && it.next.frame != nil && !bytes.Equal(it.next.stamp, it.last.stamp)
		}
		select {
		case h.results <- j:
		case <-h.stopped:
			return
		}
	}
}

// push starts a push: every view with a version is handed to the renderers
// in batches. If the last push is still out, this one is skipped: its
// views are being computed already.
func (h *hub) push() {
	q := &h.renders
	if q.out > 0 {
		return
	}
	var j *renderJob
	for _, v := range h.views {
		if v.busy || v.last.frame == nil {
			continue // its first version is being computed; feeds have none
		}
		if j == nil {
			j = &renderJob{items: make([]renderItem, 0, passBatch)}
		}
		v.busy = true
		j.items = append(j.items, renderItem{v: v, key: v.key, last: v.last})
		if len(j.items) == passBatch {
			q.batches = append(q.batches, j)
			j = nil
		}
	}
	if j != nil {
		q.batches = append(q.batches, j)
	}
	q.out = len(q.batches)
	if q.out == 0 {
		h.pushed()
	}
}

// apply takes a job back from a renderer: the watchers of each view that
// changed get its new version.
func (h *hub) apply(j *renderJob) {
	for i := range j.items {
		it := &j.items[i]
		v := it.v
		v.busy = false
		if h.views[v.key] != v {
			continue // nobody watches it any more
		}
		switch {
		case it.err != nil && j.first:
			// Nobody has had a version: tell them, and forget the view.
			for c := range v.watchers {
				c.queueError(it.err.Error())
				h.unwatch(c, v.key)
			}
		case it.err != nil:
			// A push keeps the last version; the next push tries again.
		case it.changed:
			v.last = it.next
			for c := range v.watchers {
				c.queueView(v.key, v.last.frame)
				if j.first {
					c.notify()
				} else {
					h.touch(c)
				}
			}
		case it.next.frame != nil:
			v.last.quiet = it.next.quiet
		}
	}
	if !j.first {
		if h.renders.out--; h.renders.out == 0 {
			h.pushed()
		}
	}
}

// touch notes that c has something new in this push. A client still
// queued by an earlier push is not queued again: when woken, it writes
// the newest of everything.
func (h *hub) touch(c *client) {
	if !c.touched {
		c.touched = true
		h.renders.touched = append(h.renders.touched, c)
	}
}

// pushed ends a push: what the feeds took since the last one goes to
// their watchers, and every client with something new is queued to be
// woken.
func (h *hub) pushed() {
	for _, f := range [...]feedFrame{h.alerts.take(), h.acts.take()} {
		v := h.views[viewKey{kind: feedViews[f.kind]}]
		if f.frame == nil || v == nil {
			continue
		}
		for c := range v.watchers {
			c.queueFeed(f)
			h.touch(c)
		}
	}
	q := &h.renders
	h.wakes.wake(q.touched)
	clear(q.touched)
	q.touched = q.touched[:0]
}
