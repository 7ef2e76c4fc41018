// Package matrix is the Matrix client-server API (v3) as chatpulse's bot
// uses it to act on a homeserver (docs/contract.md section 14): mute a
// user through the room's power levels, redact a message, lock a room
// through its join rules, and put each back.
//
// It owns three things:
//
//   - Client: one bot account on one homeserver. Each method is one
//     request: WhoAmI, PowerLevels and SetPowerLevels, JoinRules and
//     SetJoinRules, Redact.
//   - PowerLevels: a room's m.room.power_levels content that is written
//     back with only what the caller changed. Keys it does not know, and
//     levels it does not touch, go back byte for byte.
//   - Error and its questions: RetryAfter (rate limited: wait), Forbidden
//     (the bot lacks the power), Unauthorized (the token is not valid),
//     Temporary (worth retrying with backoff).
//
// What it must never do: decide when to act, retry on its own (the act
// queue above it owns retries, backoff and the homeserver's limits), log,
// or let the access token reach an error message.
//
// # Requests
//
// Room ids, event ids, event types and transaction ids are escaped as
// path segments: every byte but ASCII letters, digits and -._~!$:@ is
// percent-encoded, so an old room's event id with a '/' or a '+' reaches
// the homeserver intact. State is read and written with an empty state
// key, as /rooms/{roomId}/state/{eventType}/ (the trailing slash is the
// empty key). The token goes in an Authorization: Bearer header, never in
// the URL; it is asked for on every request, so a new token takes effect
// on the next one. Answers are read up to MaxBody bytes.
//
// # Errors
//
// A request the homeserver answered with other than 2xx is an *Error: the
// HTTP status, Matrix's errcode and error, and how long to wait
// (Retry-After, else the body's retry_after_ms, as spec v1.10 orders
// them). A 2xx answer that is not what the endpoint returns (not JSON,
// too large, no event_id) is an *Error too, with that status and no
// code. A request that got no answer (refused, reset, timed out) is the
// network's error with the request as context: Temporary says yes to it,
// unless the caller's context was canceled.
package matrix
