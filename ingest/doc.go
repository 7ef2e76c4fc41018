// Package ingest turns delivered messages into counted chat events: it
// decodes and validates each payload (Decode, the hot path), counts what it
// accepts in the aggregator and feeds it to the throttle policies, in
// batches, and hands every rejected message back to be dead-lettered.
//
// Messages come from a Source, whatever delivers them (package bus reads
// them from NATS), each naming the Sink it is counted in (an engine's
// stage).
//
// It never talks to the network and never decides what a count is: that is
// the aggregator's.
package ingest
