// Package bus is chatpulse's side of NATS, all of it in one place: the
// subjects and streams chatpulse uses (subjects.go), the embedded server
// and the connection (conn.go), reading the chat events (source.go: a core
// subscription; feed.go: ordered JetStream consumers, one per stage, that
// replay from a time or a sequence and mark what was handled before), the
// streams and the snapshots' object store (stream.go, objects.go), and
// what chatpulse publishes (deadletter.go: dead letters, with
// acks, none lost silently; publish.go: throttle alerts, and the micro
// service that answers throttle checks), the key-value keys that hold
// throttle policies (kv.go: read at start, watched while it runs), and the
// buckets a group keeps its settings, progress and leases in (buckets.go:
// compare-and-set writes and a watch of every key, whose lost writes and
// missing keys are ErrKeyChanged and ErrNoKey, whatever JetStream said).
//
// It decides nothing about events: it delivers them to ingest as ingest.Msg
// and publishes what it is handed.
package bus
