// Package engine is what the two ways of running chatpulse share. An
// Engine is what cmd/chatpulse runs: standalone.Engine counts every event
// itself; group.Member counts its share of a group's partitions and asks
// the others for the rest. Both are built of the same parts, which live
// here once:
//
//   - Stage: one reading of the chat stream into an aggregator and the
//     throttle policies that go with it, and how far it has read (the
//     ingest.Sink its messages name);
//   - Keeper: snapshots of stages saved to and loaded from the object
//     store (docs/contract.md section 9), the loop that saves them, and the one
//     way policies change under them (Reconfigure);
//   - Config: what both are configured with, and what follows from it:
//     the stream as chatpulse creates it (the largest window, the skew and
//     a margin) and where a replay starts.
//
// Time: stages count in event time (an event's ts, Unix milliseconds); an
// engine's own timers (snapshots, in a group the leases) run on the
// elapsed time of the local clock.
//
// It never parses events (ingest does) and never serves anything (web
// does).
package engine
