// Package throttle decides whether one more chat message from a user in a
// room would be allowed under chatpulse's moderation policies, and notices the
// moment a key first goes over an enforcing policy (docs/contract.md section 5).
//
// It owns three things:
//
//   - Six small rate-limiting algorithms, each a type that can also be used
//     on its own for a single key: SlidingWindow, SlidingWindowCounter,
//     FixedWindow, TokenBucket, GCRA and Repeat. Each doc comment explains
//     its algorithm; all of them take the time as an argument and catch up
//     lazily when called, so nothing ticks in the background.
//   - Policy, with DefaultPolicies and a YAML loader (ParsePolicies,
//     LoadPolicies) whose errors name the file, the line and the field. A
//     policy's Cost weighs what a message carries (docs/contract.md
//     section 15): a hit may be worth more than one (HitN, DecideN).
//   - Set, which keeps the keyed state of every policy with bounded memory,
//     is safe for concurrent use, turns observed messages into Alerts,
//     answers Check and Active, saves its state and loads it back, and
//     changes its policies while it runs, keeping what it can.
//
// What it must never do: read the wall clock (time is a parameter of every
// call, like AllowN(now, n) in golang.org/x/time/rate), talk to the network,
// or import a metrics library. Stats and DecisionLabels return plain numbers
// and names that the service layer turns into metrics.
//
// # Time
//
// A Set takes time as the rest of chatpulse keeps it, in Unix milliseconds:
// a message is a chat.Event (TS in ms), and Check, Active and Sweep take now
// in ms; its answers carry chat.Time. So the hot path converts nothing. The
// standalone algorithms take a time.Time, as golang.org/x/time/rate does,
// and reduce it to Unix milliseconds, rounded down. Either way the answers
// (retry_after_ms) are whole milliseconds, and so are windows and
// resolutions. For every algorithm, retry-after is exact: at now+RetryAfter
// one more message is allowed, and one millisecond earlier it is not.
//
// Time never goes backwards for a key. Messages may arrive slightly out of
// order (event time), so each algorithm says what it does with a late hit;
// the rule is the same everywhere: a read or a hit at an instant before the
// newest one the key has seen is decided as if at that newest instant.
// (GCRA, which keeps only one timestamp, decides a late hit at its own,
// earlier instant, which can only be stricter.)
//
// # Reading the code
//
// Bottom up, each line using only those above it:
//
//   - verdict.go: a Verdict, and the kernel, the part of an algorithm that
//     is the same for every key (it saves and reads its part of a state in
//     package snapshot's dialect, every length and number checked).
//   - settings.go: an algorithm's numbers, their bounds, FieldError.
//   - text.go, index.go: the keyed hash of names and normalized texts; the
//     index from a key's hash to its place.
//   - table.go, keys.go, places.go, tablestate.go: the store of one
//     policy: every key's state, for any kernel, in slabs, with bounded
//     memory; how a message's names make its key under a scope, and how a
//     key is kept in its entry; how a key gets, keeps and gives back its
//     place; how a table saves its keys and loads them back, and carries
//     them over to new settings.
//   - algorithm.go: a row of the table of algorithms.
//   - sliding.go, counter.go, fixed.go, tokenbucket.go, gcra.go, repeat.go:
//     one algorithm each: the doc that teaches it, its standalone type, its
//     kernel and kernel constructor, and its row.
//   - pairs.go, similar.go, simstore.go, simindex.go, simdecide.go,
//     simstate.go: similar, whose keys keep windows of varying size, so it
//     has a store of its own: a text's word pairs and fingerprint; the
//     algorithm, its parameters and row; each key's window of
//     fingerprints; its index; how it decides and records; how it saves,
//     loads and carries them.
//   - lru.go: the list, most recently observed first, in which the
//     similar and spike stores keep their keys for eviction.
//   - policy.go, rules.go: Policy, the table of
//     algorithms and validation; the policies as a Set decides with them.
//   - extra.go: what a few keys keep beyond their algorithm's state: the
//     ids of their recent hits, their penalty.
//   - answers.go, set.go, consume.go: Result, Alert and Active; the Set;
//     its consuming checks.
//   - state.go: a Set's saved state (each kernel saves and checks its own
//     part, in its file).
//   - reconfigure.go: new policies for a running Set, and what each keeps
//     (each kernel keeps its part, in its file; tablestate.go, a table's).
//   - yaml.go: the policies file.
package throttle
