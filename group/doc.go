// Package group runs chatpulse as one member of a group of instances that
// share the work over a NATS cluster with JetStream (docs/contract.md
// section 8). Any member answers every view, websocket view and throttle
// check for the whole group.
//
// Where each job lives:
//
//	member.go     Member, the engine.Engine: New, Attach, Run, Close; the hand the lease loop drives
//	partition.go  a partition's life on this member: its named states, their one table, their owner
//	open.go       a run's opening: resume the parked run, or load the snapshot; a feed per stage
//	stage.go      a stage: one fenced reading of a partition, which acts only while the lease is valid
//	progress.go   how far each partition was handled, handed from one holder to the next
//	snapshot.go   a partition's snapshot: saved by its owner, loaded by the next
//	views.go      the group's views, asked of the owners and merged
//	checks.go     the throttle checks, consuming checks and their take-backs, asked of the owners
//	query.go      the members' protocol: what one asks another, and the answers
//	merge.go      merging partial views, exactly
//	policies.go   the throttle policies, split by stage; Reconfigure
//	filer.go      filing a foreign bus's events on chat.<room>.<user> (--source-stream)
//	status.go     GET /api/v1/group, the metrics, the lag
//	settings.go   what every member must agree on: partitions, windows
//	lease/        membership and partition leases, fenced; it knows nothing of partitions' contents
//
// Partitions. The chat stream files every event published on
// chat.<room>.<user> under _CP.<r>.<u>.<room>.<user>. It is a subject
// transform of the stream: r and u are FNV-1a of the room and user tokens,
// mod --partitions, computed by NATS and again here by Partition. So one
// stored copy can be read by room and by user.
//
// Stages. Partition p has two, each a full aggregator with the policies
// of its scope, fed by an ordered consumer with one filter subject. The
// room stage reads _CP.p.*.*.*: every event of the rooms that hash to p.
// The user stage reads _CP.*.p.*.*: every event of the users that hash to
// p. Rooms are disjoint across room stages, and users across user stages.
// So every view is an exact merge: sums, and tops of the union of tops,
// never a top-k of counts split across shards.
//
// Ownership. Package lease says who holds each partition, and starts and
// stops this member's runs of them (partitions.Start, Stop). A run acts
// (alerts, dead letters, progress) only behind its fence: while its lease
// is valid. No two members ever answer for one partition.
//
// Answers. A view is asked of the members that own the partitions it
// needs, over NATS request-reply, and merged. Partitions without a
// caught-up owner are reported as missing_partitions, with complete
// false, never silently left out. A throttle check goes to the owners of
// its room's and its user's partitions.
//
// A Member is built of engine's stages and keeper, as a standalone
// instance is. It imports engine, ingest, aggregator, throttle and bus,
// and none of them knows it exists.
package group
