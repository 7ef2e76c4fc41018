package web

import (
	"encoding/json"
	"sync/atomic"
)

// The feeds on the websocket: the throttle alerts, and the acts on the
// chat system with their undos (docs/contract.md section 14). Both are
// coalesced into the push. A client that subscribed to a feed's view gets,
// at most once per push interval, one frame with what came since the
// last:
//
//	{"type":"alerts","data":[{"policy",...},...],"omitted":N}
//	{"type":"acts","data":[{"kind","room",...},...],"omitted":N}
//
// data holds at most maxPerFrame items, oldest first. omitted counts
// those left out:
//
//   - the older ones of a busy interval;
//   - the ones the hub was too far behind to take;
//   - for a client that has not written its frames for maxFeedFrames
//     pushes, those in the frames it dropped (it then gets a frame with no
//     data and their count).
//
// So every item a client subscribed for is in a frame it gets or counted
// in one. A flood costs each client one frame per push and feed, never one
// per item.

const (
	maxPerFrame   = 50 // what a dashboard shows
	maxFeedFrames = 4  // unsent frames of a feed that a client keeps
)

// A feedKind names a feed.
type feedKind int

const (
	feedAlerts feedKind = iota
	feedActs
	numFeeds
)

// feedViews are the feeds' views, and the types of their frames.
var feedViews = [numFeeds]viewKind{viewAlerts, viewActs}

// A feed takes items from any goroutine and keeps them, on the hub's,
// for the next push.
type feed[T any] struct {
	kind   feedKind
	in     chan T
	missed atomic.Int64 // items dropped because the hub was behind

	// Owned by the hub.
	items   []T   // the newest, up to twice maxPerFrame
	omitted int64 // older ones dropped
}

func newFeed[T any](kind feedKind) *feed[T] {
	return &feed[T]{kind: kind, in: make(chan T, 256)}
}

// send hands an item to the hub, for the next push. It never blocks: if
// the hub is that far behind, the item is dropped and counted in the next
// frame's omitted.
func (f *feed[T]) send(item T) {
	select {
	case f.in <- item:
	default:
		f.missed.Add(1)
	}
}

// add keeps an item for the next push. Past twice the frame's bound the
// older half goes in one copy, so an item costs O(1) however many come.
func (f *feed[T]) add(item T) {
	if len(f.items) == 2*maxPerFrame {
		f.items = f.items[:copy(f.items, f.items[maxPerFrame:])]
		f.omitted += maxPerFrame
	}
	f.items = append(f.items, item)
}

// take empties f into one frame, counting missed items as omitted; no
// frame if there was nothing.
func (f *feed[T]) take() feedFrame {
	keep := f.items[max(0, len(f.items)-maxPerFrame):]
	omitted := f.omitted + f.missed.Swap(0) + int64(len(f.items)-len(keep))
	var out feedFrame
	if len(keep) > 0 || omitted > 0 {
		out = newFeedFrame(f.kind, keep, omitted)
	}
	clear(f.items)
	f.items, f.omitted = f.items[:0], 0
	return out
}

// feedFrame is a feed's frame and how many items it stands for.
type feedFrame struct {
	kind  feedKind
	frame []byte
	n     int64 // len(data) + omitted
}

func newFeedFrame[T any](kind feedKind, items []T, omitted int64) feedFrame {
	if items == nil {
		items = []T{}
	}
	b, _ := json.Marshal(struct {
		Type    viewKind `json:"type"`
		Data    []T      `json:"data"`
		Omitted int64    `json:"omitted"`
	}{feedViews[kind], items, omitted})
	return feedFrame{kind: kind, frame: b, n: int64(len(items)) + omitted}
}
