// Package group runs chatpulse as one member of a group of instances that
// share the work over a NATS cluster with JetStream (docs/contract.md section 8),
// and answers every view, websocket view and throttle check for the whole
// group from any member.
//
// Partitions. The chat stream files every event published on
// chat.<room>.<user> under _CP.<r>.<u>.<room>.<user> (a subject transform
// of the stream: r and u are FNV-1a of the room and user tokens, mod
// --partitions, computed by NATS and recomputed here by Partition), so one
// stored copy can be read by room and by user. Partition p has two stages,
// each a full aggregator with the throttle policies of its scope fed by an
// ordered consumer with one filter subject: the room stage reads
// _CP.p.*.*.* (every event of the rooms that hash to p) and the user stage
// _CP.*.p.*.* (every event of the users that hash to p). Rooms are disjoint
// across room stages and users across user stages, so every view is exact
// as a merge (merge.go): sums and tops of the union of tops, never a top-k
// of counts split across shards.
//
// Membership and ownership (lease.go). Members keep a key each in a
// key-value bucket whose keys expire a lease after their last write; every
// member computes, from the live members, who should own each partition
// (rendezvous hashing: when one leaves or joins, only its share moves) and
// claims its partitions with compare-and-set writes of a key per partition,
// renewed four times a lease. A member stops answering for a partition
// before its lease can expire on the server, so no two members ever answer
// for one partition.
//
// Answers (views.go, query.go). A view is asked of the members that own
// the partitions it needs, over NATS request-reply, and merged; partitions
// without a caught-up owner are reported as missing_partitions with
// complete false rather than silently left out. Throttle checks go to the
// owners of the check's room and user partitions.
//
// A Member is an engine.Engine, built of engine's stages and keeper as a
// standalone instance is. It imports engine, ingest, aggregator, throttle
// and bus, and none of them knows it exists.
package group
