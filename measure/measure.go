package measure

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Counts are what one message carries.
type Counts struct {
	Mentions int // distinct users it mentions
	Links    int // http:// and https:// URLs in its text
	Newlines int // '\n' in its text
	Chars    int // code points of its text
	Emoji    int // code points of its text that are Extended_Pictographic
}

// What says which counts Of takes: one bit per count.
type What uint8

// The counts Of can take.
const (
	CountMentions What = 1 << iota
	CountLinks
	CountNewlines
	CountChars
	CountEmoji
)

// Of returns the counts that what asks for, of a message with text that
// mentions names; the others are 0.
func Of(text string, names []string, what What) Counts {
	var c Counts
	if what&CountMentions != 0 {
		c.Mentions = Mentions(names)
	}
	if what&CountLinks != 0 {
		c.Links = Links(text)
	}
	if what&CountNewlines != 0 {
		c.Newlines = Newlines(text)
	}
	if what&CountChars != 0 {
		c.Chars = Chars(text)
	}
	if what&CountEmoji != 0 {
		c.Emoji = Emoji(text)
	}
	return c
}

// Mentions is the number of distinct names: a user mentioned twice is
// mentioned once. Names are compared byte for byte.
func Mentions(names []string) int {
	if len(names) <= 16 { // compare each with those before it: no allocation
		n := 0
		for i, a := range names {
			if !slices.Contains(names[:i], a) {
				n++
			}
		}
		return n
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	return len(slices.Compact(sorted))
}

// Links is the number of URLs in text. A URL is a run of non-space
// characters that starts with http:// or https:// (in any case) and has
// at least one character after that. A run starts wherever such a prefix
// does, inside a word too, so "see:http://a,http://b" holds two: a
// spammer gains nothing by gluing links together.
func Links(text string) int {
	n := 0
	// Every URL holds "://": find each (strings.Index is fast), then
	// look back for its scheme. Schemes cannot overlap: "http" holds no
	// other 'h'.
	for i := 0; ; {
		j := strings.Index(text[i:], "://")
		if j < 0 {
			return n
		}
		colon := i + j
		i = colon + len("://")
		if !isScheme(text, colon) || i == len(text) {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(text[i:]); !unicode.IsSpace(r) {
			n++
		}
	}
}

// isScheme reports whether http or https (in any case) ends just before
// text[colon].
func isScheme(text string, colon int) bool {
	if colon >= 5 && text[colon-1]|0x20 == 's' {
		colon--
	}
	if colon < 4 {
		return false
	}
	s := text[colon-4 : colon]
	return s[0]|0x20 == 'h' && s[1]|0x20 == 't' && s[2]|0x20 == 't' && s[3]|0x20 == 'p'
}

// Newlines is the number of '\n' in text.
func Newlines(text string) int { return strings.Count(text, "\n") }

// Chars is the number of code points of text.
func Chars(text string) int {
	ascii := asciiRun(text) // one code point a byte
	return ascii + utf8.RuneCountInString(text[ascii:])
}

// Emoji is the number of code points of text that are
// Extended_Pictographic (Unicode's emoji-data.txt): the pictographs, not
// the parts of an emoji sequence (variation selectors, skin tone
// modifiers, joiners, regional indicators), nor digits and # and *, which
// are Emoji only when a sequence makes them so. So a family emoji of four
// people joined by zero-width joiners is four.
func Emoji(text string) int {
	n := 0
	for i := asciiRun(text); i < len(text); i += asciiRun(text[i:]) { // no ASCII code point is one
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if r >= 0xA9 && unicode.Is(extendedPictographic, r) { // the first is U+00A9
			n++
		}
	}
	return n
}

// asciiRun is the length of the run of ASCII bytes that text starts
// with, read eight bytes at a time.
func asciiRun(text string) int {
	i := 0
	for ; i+8 <= len(text); i += 8 {
		w := uint64(text[i]) | uint64(text[i+1])<<8 | uint64(text[i+2])<<16 | uint64(text[i+3])<<24 |
			uint64(text[i+4])<<32 | uint64(text[i+5])<<40 | uint64(text[i+6])<<48 | uint64(text[i+7])<<56
		if w&0x8080808080808080 != 0 {
			break
		}
	}
	for i < len(text) && text[i] < utf8.RuneSelf {
		i++
	}
	return i
}
