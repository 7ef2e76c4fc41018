// Package lease runs a group member's membership and partition leases
// (docs/contract.md section 8): it keeps this member's key alive,
// watches everyone's, computes which partitions should be whose
// (rendezvous), and claims, renews and releases partition leases with
// compare-and-set writes, so that two members never hold one partition.
//
// Fencing: a lease key lives ttl after its last write (the bucket's
// MaxAge), and we rewrite it every ttl/4. We count our ownership valid for
// 3/4 ttl from when we sent the last write that succeeded (so one renewal
// that fails or comes late costs nothing), and a partition
// whose lease we could not renew by then is stopped by a timer at that
// moment, whatever the loop is doing: before the key can expire on the
// server (ttl after it received the write, which was after we sent it) and
// another member can create it. Every write has a deadline of ttl/4
// (WriteTimeout; one for all of a tick's renewals), so a bucket that does
// not answer holds the loop up for no more than that: it drops what it
// could not renew by the next tick. A renewal that comes back after the
// validity it extends has run out does not bring the partition back.
//
// Ghosts: the loop's members and owners are what a watch of the bucket
// has said. A watch can miss an expiry (a gap longer than the bucket's
// expiry markers live), so the loop watches again every ttl, and whenever
// a watch breaks (a reconnect) or cannot be made (tried again each tick):
// each new watch's keys replace what the loop knew, once they have all
// come.
//
// Time: leases run on elapsed time, this member's monotonic clock (clock:
// time.Now, whose readings carry it, so stepping the wall clock moves no
// lease; Owns is asked with one of its readings, Loop.Now), while views and
// throttles run on event time, the events' own timestamps, which never
// move a lease. The loop reads the clock once per tick, after writing our
// member key, to decide which partitions to stop (renew's now), and at the
// send of each partition write, to stamp it (writeOwner's sent): a write
// can take seconds, and each lease counts from its own write's send.
//
// Ownership: every member computes, from the live members, who should own
// each partition (rendezvous hashing, OwnerOf: when one leaves or joins,
// only its share moves) and claims its own with compare-and-set writes of
// a key per partition. It imports only bus: what a partition is, and what
// starting or stopping one does, is the Hand's.
package lease
