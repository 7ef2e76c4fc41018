// Package act acts on the chat system (docs/contract.md section 14): it
// mutes the users who cross a policy that says mute, redacts the messages
// such a policy would have denied, and locks a room against a join wave;
// and it undoes each mute and lock exactly, when it is due.
//
// It owns three things:
//
//   - The decisions: an Actor is told of every message over a policy that
//     acts (throttle.Over) and turns them into jobs. It never acts on the
//     room's own moderators, on its own bot, or on the users a policy
//     exempts.
//   - The homeserver's queue: one worker makes every change, in turn, so
//     that two changes of one room's power levels never race. It waits
//     out 429s, retries network errors and 5xx with backoff, and stops
//     acting in a room where the bot lacks the power. Mutes, locks and
//     undos go ahead of redactions; a full queue drops redactions first.
//   - The undos due: each mute and lock is a record in the moderation
//     bucket, written before the change is made, and deleted once it is
//     undone. So a restart, a crash or a takeover neither forgets an undo
//     nor does one twice: an undo only puts back what chatpulse set, and
//     leaves alone what someone else changed since.
//
// It does not count or decide anything: the throttle policies do. It knows
// the chat system through a Homeserver (package matrix).
package act
