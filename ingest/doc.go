// Package ingest turns NATS messages into counted chat events: it decodes
// and validates each payload (Decode, the hot path), feeds what it accepts to
// the aggregator and the throttle policies in batches, and republishes every
// rejected message unchanged to chatpulse.deadletter.<reason>.
//
// With JetStream (the default) it makes sure the chat and dead-letter
// streams exist and reads the chat stream with an ordered consumer that
// starts one largest window back, so a restart rebuilds every window; it is
// Ready once that replay has caught up. Without JetStream it is a plain
// subscription with a deep buffer whose drops are counted and logged.
//
// It never consumes chatpulse's own chatpulse.> subjects, and it never
// decides what a count is: that is the aggregator's.
package ingest
