package measure

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// The reference counts: written over the text's code points, as the
// contract words each rule, not over bytes as the package does.

func refLinks(text string) int {
	rs := []rune(text) // an invalid byte is one U+FFFD
	n := 0
	for i := range rs {
		for _, scheme := range []string{"http://", "https://"} {
			s := []rune(scheme)
			if i+len(s) >= len(rs) { // a character must follow
				continue
			}
			if strings.EqualFold(string(rs[i:i+len(s)]), scheme) && asciiOnly(rs[i:i+len(s)]) && !unicode.IsSpace(rs[i+len(s)]) {
				n++
			}
		}
	}
	return n
}

// asciiOnly: "either case" is ASCII's; EqualFold would also take the
// Kelvin sign for a k, or the long s for an s.
func asciiOnly(rs []rune) bool {
	for _, r := range rs {
		if r >= 0x80 {
			return false
		}
	}
	return true
}

func refMentions(names []string) int {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return len(set)
}

func refCounts(text string, names []string) Counts {
	c := Counts{Mentions: refMentions(names), Links: refLinks(text)}
	for _, r := range text {
		c.Chars++
		if r == '\n' {
			c.Newlines++
		}
		if refEmoji[r] {
			c.Emoji++
		}
	}
	return c
}

// refEmoji are code points known to be Extended_Pictographic (true) and
// known not to be (false), from Unicode's emoji-data.txt 15.0.
var refEmoji = map[rune]bool{
	0x1F600: true, // 😀 grinning face
	0x00A9:  true, // © copyright: Extended_Pictographic, though text by default
	0x00AE:  true, // ®
	0x203C:  true, // ‼
	0x2122:  true, // ™
	0x2194:  true, // ↔
	0x2603:  true, // ☃ snowman
	0x2605:  true, // ★ black star
	0x266A:  true, // ♪ eighth note
	0x2764:  true, // ❤ heart
	0x2728:  true, // ✨
	0x2B50:  true, // ⭐
	0x3030:  true, // 〰
	0x1F004: true, // 🀄
	0x24C2:  true, // Ⓜ
	0x1FA77: true, // 🩷 pink heart, new in Emoji 15.0
	0x1FAE0: true, // 🫠 melting face, Emoji 14.0
	0x1F44D: true, // 👍
	0x1F466: true, // 👦, 👧, 👨, 👩: a family's members
	0x1F467: true,
	0x1F468: true,
	0x1F469: true,
	0x1FC00: true, // reserved: Extended_Pictographic keeps room for future emoji
	0x1FFFD: true,
	'#':     false, // Emoji, but only as part of a keycap sequence
	'0':     false,
	'*':     false,
	'a':     false,
	0x00AA:  false, // ª
	0x00E9:  false, // é
	0x4E2D:  false, // 中
	0x20AC:  false, // €
	0x2192:  false, // → (↔ is; → is not)
	0xFE0F:  false, // variation selector-16
	0x200D:  false, // zero-width joiner
	0x20E3:  false, // combining enclosing keycap
	0x1F1E6: false, // regional indicator A
	0x1F3FB: false, // skin tone modifier
	0x1FFFE: false, // a noncharacter, past the reserved block
	0xFFFD:  false, // what an invalid byte reads as
}

func TestEmojiTable(t *testing.T) {
	for r, want := range refEmoji {
		if got := unicode.Is(extendedPictographic, r); got != want {
			t.Errorf("U+%04X: Extended_Pictographic %v, want %v", r, got, want)
		}
	}
}

// TestEmojiTableIsGenerated regenerates the table from Unicode's file,
// where the machine has it (apt-get install unicode-data), and wants the
// file that is checked in.
func TestEmojiTableIsGenerated(t *testing.T) {
	if _, err := os.Stat("/usr/share/unicode/emoji/emoji-data.txt"); err != nil {
		t.Skip("no emoji-data.txt:", err)
	}
	out := filepath.Join(t.TempDir(), "emoji_table.go")
	if msg, err := exec.Command("go", "run", "gen_emoji.go", "-out", out).CombinedOutput(); err != nil {
		t.Fatalf("go run gen_emoji.go: %v: %s", err, msg)
	}
	src, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("emoji_table.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(src) != string(have) {
		t.Error("emoji_table.go is not what gen_emoji.go makes of emoji-data.txt: go generate ./measure/")
	}
}

func TestByHand(t *testing.T) {
	for _, c := range []struct {
		text  string
		names []string
		want  Counts
	}{
		{"", nil, Counts{}},
		{"gg", []string{"a", "b", "a"}, Counts{Mentions: 2, Chars: 2}},
		{"see https://example.com and http://x", nil, Counts{Links: 2, Chars: 36}},
		{"HTTPS://A HtTp://b", nil, Counts{Links: 2, Chars: 18}},
		{"http:// nothing after the scheme, https://", nil, Counts{Chars: 42}},
		{"http://\u00a0no-break space after", nil, Counts{Chars: 28}},
		{"http://é", nil, Counts{Links: 1, Chars: 8}},
		{"www.example.com example.com/x ftp://x", nil, Counts{Chars: 37}},
		{"glued:http://a,http://b,https://c", nil, Counts{Links: 3, Chars: 33}},
		{"hhttp://a hhttps://b", nil, Counts{Links: 2, Chars: 20}},
		{"http:/a https:a http//a", nil, Counts{Chars: 23}},
		{"a\nb\r\nc\n", nil, Counts{Newlines: 3, Chars: 7}},
		{"😀😀 → ★ é 中", nil, Counts{Emoji: 3, Chars: 10}},
		{"👨\u200d👩\u200d👧\u200d👦", nil, Counts{Emoji: 4, Chars: 7}},
		{"👍🏽 🇫🇷 #️⃣ ❤️", nil, Counts{Emoji: 2, Chars: 12}},
		{"\xff\xfehttp://\xff", nil, Counts{Links: 1, Chars: 10}},
	} {
		got := Of(c.text, c.names, CountMentions|CountLinks|CountNewlines|CountChars|CountEmoji)
		if got != c.want {
			t.Errorf("Of(%q, %q) = %+v, want %+v", c.text, c.names, got, c.want)
		}
		if ref := refCounts(c.text, c.names); ref != c.want {
			t.Errorf("the reference for %q: %+v, want %+v", c.text, ref, c.want)
		}
	}
}

func TestOfTakesWhatItIsAsked(t *testing.T) {
	text, names := "a\nhttp://x 😀", []string{"a"}
	all := Of(text, names, CountMentions|CountLinks|CountNewlines|CountChars|CountEmoji)
	for _, c := range []struct {
		what What
		want Counts
	}{
		{0, Counts{}},
		{CountMentions, Counts{Mentions: all.Mentions}},
		{CountLinks | CountEmoji, Counts{Links: all.Links, Emoji: all.Emoji}},
		{CountNewlines | CountChars, Counts{Newlines: all.Newlines, Chars: all.Chars}},
	} {
		if got := Of(text, names, c.what); got != c.want {
			t.Errorf("Of(%b) = %+v, want %+v", c.what, got, c.want)
		}
	}
}

// randomText is a text of the pieces the counts look for and those that
// look like them: multi-byte code points, emoji and symbols that are not,
// URLs with and without a scheme, white space of every kind, invalid
// bytes.
func randomText(r *rand.Rand) string {
	pieces := []string{"a", "gg ", "é", "中文", "😀", "👨\u200d👩\u200d👧", "🇫🇷", "👍🏽", "★", "→", "€", "©", "#️⃣", "\ufe0f",
		"http://", "https://", "HTTP://", "hTtPs://", "http:/", "https:", "ftp://", "www.example.com", "example.com/x", "x.io",
		" ", "\n", "\r\n", "\t", "\u00a0", "\u3000", "\u2028", "\xff", "\xe2\x82", "h", "H", "ttp://", "s://"}
	var b strings.Builder
	for range r.IntN(30) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randomNames(r *rand.Rand) []string {
	var names []string
	for range r.IntN(40) {
		names = append(names, []string{"@alice:x", "@bob:x", "@Alice:x", "carol", "", "é", "@alice:x "}[r.IntN(7)])
	}
	return names
}

// TestAgainstReference compares every count with the reference on random
// texts and lists of names, mentions repeated.
func TestAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	all := CountMentions | CountLinks | CountNewlines | CountChars | CountEmoji
	for range 20_000 {
		text, names := randomText(r), randomNames(r)
		want := refCounts(text, names)
		// Emoji the reference does not know are checked by TestEmojiTable.
		want.Emoji = 0
		for _, rn := range text {
			if unicode.Is(extendedPictographic, rn) {
				want.Emoji++
			}
		}
		if got := Of(text, names, all); got != want {
			t.Fatalf("Of(%q, %q) = %+v, reference %+v", text, names, got, want)
		}
	}
}

// FuzzText reads hostile text: every count must agree with the
// reference's (emoji with the table, checked by TestEmojiTable), and
// none may panic.
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "http://a", "hTTps://\xff", "😀\n★", "\xf0\x9f\x98", "https://\u3000x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c := Of(text, nil, CountLinks|CountNewlines|CountChars|CountEmoji)
		ref := refCounts(text, nil)
		if c.Links != ref.Links || c.Newlines != ref.Newlines || c.Chars != ref.Chars {
			t.Fatalf("%q: %+v, reference %+v", text, c, ref)
		}
		emoji := 0
		for _, r := range text {
			if unicode.Is(extendedPictographic, r) {
				emoji++
			}
		}
		if c.Emoji != emoji {
			t.Fatalf("%q: %d emoji, want %d", text, c.Emoji, emoji)
		}
	})
}

// FuzzMentions counts distinct names however many there are (the sort
// past 16, the scan below).
func FuzzMentions(f *testing.F) {
	f.Add("a,b,a", 1)
	f.Add("x", 40)
	f.Fuzz(func(t *testing.T, list string, repeat int) {
		names := strings.Split(list, ",")
		for range min(max(repeat, 0), 50) {
			names = append(names, names[len(names)%len(names)])
		}
		if got, want := Mentions(names), refMentions(names); got != want {
			t.Fatalf("Mentions(%q) = %d, want %d", names, got, want)
		}
	})
}

func BenchmarkOf(b *testing.B) {
	text := strings.Repeat("hello https://example.com 😀 ", 8)
	names := []string{"@a:x", "@b:x", "@a:x"}
	b.ReportAllocs()
	for range b.N {
		Of(text, names, CountMentions|CountLinks|CountNewlines|CountChars|CountEmoji)
	}
	b.SetBytes(int64(len(text)))
}
