// Package aggregator keeps the live views of chat traffic: per window, the
// overall count and series, the messages of every active room and user,
// distinct users per room and overall, the top talkers and rooms, and
// the joins and leaves of every room (docs/contract.md section 12,
// crowds.go: counted apart from the messages; members.go remembers each
// member's last join or leave, so that a repeated one counts nowhere). It owns all of that state
// behind one lock and answers the contract's views (section 3) at any
// as_of.
//
// Every window holds two sparse keyed counters (rolling.Keyed), one for
// (room, user) pairs and one for rooms (whose cells are also the room's
// series), and a dense counter for the total. A user's count is the sum of
// its pairs', kept as they rise and fall. An event is one lookup of its
// pair (pairTable; a batch's lookups are done first, so that their cache
// misses overlap), then in each window one add to each counter and a push
// into each of three lazily-deleted heaps (topk): the room's talkers, the
// top rooms and the top users. A push is a compare or two for most events:
// a heap takes no pushes while nobody reads it, nor for keys under its
// floor. Expiry runs through rolling's callbacks, which is where counts and
// distinct counts fall and where a pair, room or user with nothing left in
// any window is forgotten.
//
// Memory is bounded by what the windows hold, and forgetting gives it
// back: a forgotten key is dropped from the maps and the pair table (which
// shrink once a flood of keys has gone), the heaps drop their entries for
// keys that fell to zero (topk.Heap.Fell), and ring slots give back the
// room a flood made them take. keys.go lists the state and its invariants.
//
// It never reads the wall clock: callers pass now (Unix milliseconds).
package aggregator
