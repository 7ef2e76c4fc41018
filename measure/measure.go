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
	for i := 0; i < len(text); i++ {
		if text[i]|0x20 != 'h' { // 'h' or 'H'; no other byte
			continue
		}
		end := schemeEnd(text, i)
		if end < 0 || end == len(text) {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(text[end:]); !unicode.IsSpace(r) {
			n++
		}
		i = end - 1 // the scheme holds no other 'h'
	}
	return n
}

// schemeEnd is the index after the http:// or https:// (in any case) that
// starts at text[i], or -1.
func schemeEnd(text string, i int) int {
	s := text[i:]
	if len(s) < len("http://") || s[1]|0x20 != 't' || s[2]|0x20 != 't' || s[3]|0x20 != 'p' {
		return -1
	}
	j := 4
	if s[j]|0x20 == 's' {
		j++
	}
	if !strings.HasPrefix(s[j:], "://") {
		return -1
	}
	return i + j + len("://")
}

// Newlines is the number of '\n' in text.
func Newlines(text string) int { return strings.Count(text, "\n") }

// Chars is the number of code points of text.
func Chars(text string) int { return utf8.RuneCountInString(text) }

// Emoji is the number of code points of text that are
// Extended_Pictographic (Unicode's emoji-data.txt): the pictographs, not
// the parts of an emoji sequence (variation selectors, skin tone
// modifiers, joiners, regional indicators), nor digits and # and *, which
// are Emoji only when a sequence makes them so. So a family emoji of four
// people joined by zero-width joiners is four.
func Emoji(text string) int {
	n := 0
	for i := 0; i < len(text); {
		if text[i] < 0xA9 { // the first Extended_Pictographic code point is U+00A9
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		if unicode.Is(extendedPictographic, r) {
			n++
		}
	}
	return n
}
