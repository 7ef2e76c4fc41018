// Package measure counts what a chat message carries, as docs/contract.md
// section 15 defines each count: the users it mentions, and the links,
// newlines, code points and emoji of its text. The throttle weighs these
// counts (a policy's cost); this package only counts.
//
// Every function reads hostile text: any bytes, of any length. An invalid
// UTF-8 byte counts as one code point, U+FFFD, as a range over a string
// reads it. Each runs in time linear in its input (Mentions: n log n for
// many names), and none allocates, but Mentions over many names.
//
// It imports no other package of chatpulse, and never guesses a mention
// from the text: who an event mentions is what the event says.
package measure

//go:generate go run gen_emoji.go
