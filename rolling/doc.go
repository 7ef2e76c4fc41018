// Package rolling counts events over clock-defined windows in memory that
// never grows with the number of events.
//
// A window of size W and resolution r is a ring of n = W/r buckets. The
// bucket of an instant t (Unix milliseconds) is b(t) = floor(t/r), and a
// window read at time T holds exactly the events whose bucket lies in
// [b(T)-n+1, b(T)]. Every call takes its time explicitly, as a bucket
// number; nothing here reads the wall clock and nothing ticks in the
// background. Each structure keeps a head, the newest bucket it has reached,
// and catches up lazily in one place (advance): moving the head forward by d
// buckets empties min(d, n) buckets, and a gap of a whole window or more
// resets in one step. Over a run that is O(1) amortized per call, and every
// count is maintained, never summed per query.
//
// Time need not be supplied in order. An event whose bucket is still inside
// the window goes into that bucket even if newer events came first (bounded
// lateness); one older than the window is refused with ErrLate.
//
// Counter counts one stream. Keyed counts many keys (users in a room, say)
// sparsely: a key holds one cell per bucket in which it had events, so
// memory is bounded by the (key, bucket) pairs inside the window, and a key
// whose cells have all expired is forgotten. Expiry reports every count that
// fell through a callback, which is how a top-k structure learns of it.
//
// Nothing here is safe for concurrent use; the owner serialises access.
package rolling
