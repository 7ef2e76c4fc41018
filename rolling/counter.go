package rolling

import (
	"errors"

	"github.com/chatpulse/chatpulse/chat"
)

// ErrLate is returned for an event whose bucket has already left the window.
var ErrLate = errors.New("older than the window")

// never is the head of a structure that has seen no time yet.
const never = chat.Never

// Counter counts events in the last n buckets: a ring of buckets and the
// running total of what the ring holds.
//
// counts[slot(b)] holds bucket b for every b in (head-n, head]. Advancing the
// head to a newer bucket empties the slots of the buckets that left and
// subtracts them from total, so Count is a read of total, never a sum.
type Counter struct {
	counts []int64
	total  int64
	head   int64
	hs     int // the head's slot: most adds land there and need no division
}

// NewCounter returns a counter over n buckets.
func NewCounter(n int) Counter {
	if n < 1 {
		panic("rolling: a window needs at least one bucket")
	}
	return Counter{counts: make([]int64, n), head: never}
}

func (c *Counter) slot(b int64) int { return slot(b, len(c.counts)) }

func slot(b int64, n int) int {
	i := int(b % int64(n))
	if i < 0 {
		i += n
	}
	return i
}

// advance moves the head to bucket b, emptying the buckets that leave the
// window. It is the only place where time moves.
func (c *Counter) advance(b int64) {
	if b <= c.head {
		return
	}
	n := int64(len(c.counts))
	if c.head == never || b-c.head >= n {
		clear(c.counts) // every bucket is stale: one step, however long the gap
		c.total = 0
	} else {
		for s := c.head + 1; s <= b; s++ { // at most n steps
			i := c.slot(s)
			c.total -= c.counts[i]
			c.counts[i] = 0
		}
	}
	c.head, c.hs = b, c.slot(b)
}

// Add counts k events in bucket b. Buckets newer than the head move it;
// older ones still in the window are added where they belong; older than
// that is ErrLate.
func (c *Counter) Add(b int64, k int64) error {
	if b == c.head && b != never {
		c.counts[c.hs] += k
		c.total += k
		return nil
	}
	return c.add(b, k)
}

func (c *Counter) add(b int64, k int64) error {
	c.advance(b)
	if b <= c.head-int64(len(c.counts)) {
		return ErrLate
	}
	c.counts[c.slot(b)] += k
	c.total += k
	return nil
}

// Count is the number of events in the window as of bucket b. It moves the
// head to b if b is newer; a b older than the head reads the head's window.
func (c *Counter) Count(b int64) int64 {
	c.advance(b)
	return c.total
}

// Series appends the per-bucket counts of the window as of bucket b, oldest
// first, n values, to dst.
func (c *Counter) Series(b int64, dst []int64) []int64 {
	c.advance(b)
	n := int64(len(c.counts))
	for s := c.head - n + 1; s <= c.head; s++ {
		dst = append(dst, c.counts[c.slot(s)])
	}
	return dst
}
