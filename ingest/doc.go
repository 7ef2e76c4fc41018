// Package ingest turns delivered messages into counted chat events: it
// decodes and validates each payload (Decode, the hot path), counts what it
// accepts in the aggregator and feeds it to the throttle policies, in
// batches, and hands every rejected message back to be dead-lettered.
//
// Payloads come in one of several formats (Format, --input): chatpulse's
// own, a Matrix homeserver's room events, or any JSON through a mapping
// file. There is one decoder with two front ends over the same
// single-pass scanner: the native one reads its fixed fields where it
// meets them (fields.go); the mapping one walks down only the members
// its JSON pointers name and reads what it found after the scan
// (mapping.go; Matrix is a built-in mapping plus Matrix's rules,
// matrix.go). Both read a value with the same functions (values.go).
//
// Messages come from a Source, whatever delivers them (package bus reads
// them from NATS), each naming the Sink it is counted in (an engine's
// stage).
//
// It never talks to the network and never decides what a count is: that is
// the aggregator's.
package ingest
