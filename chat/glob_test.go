package chat

import "testing"

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern string
		yes, no []string
	}{
		{"lobby", []string{"lobby"}, []string{"lobby2", "Lobby", ""}},
		{"support-*", []string{"support-", "support-eu", "support-a/b"}, []string{"support", "xsupport-eu"}},
		{"*", []string{"", "a", "a/b/c"}, nil},
		{"a*b*c", []string{"abc", "aXbYc", "abbbc", "a/b/c", "acbc"}, []string{"ab", "acb", "abcx"}},
		{"?", []string{"a", "é", "日"}, []string{"", "ab"}},
		{"r?om-*-?", []string{"room-x-1", "rüom--é"}, []string{"rom-x-1", "room-x-"}},
		{`\*lit\?`, []string{"*lit?"}, []string{"xlit?", "*lit!"}},
		{"*a", []string{"a", "aaa", "ba"}, []string{"ab", ""}},
		{"**x**", []string{"x", "axb"}, []string{"ab"}},
	} {
		g, err := CompileGlob(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		for _, s := range c.yes {
			if !g.Match(s) {
				t.Errorf("%q does not match %q", c.pattern, s)
			}
		}
		for _, s := range c.no {
			if g.Match(s) {
				t.Errorf("%q matches %q", c.pattern, s)
			}
		}
	}
	for _, bad := range []string{"", `abc\`, "[abc]", "a]", "\xff*"} {
		if _, err := CompileGlob(bad); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

// FuzzGlob: a glob matches the same strings as a reference matcher that
// tries every split (exponential, fine for fuzz-sized inputs).
func FuzzGlob(f *testing.F) {
	f.Add("a*b?c", "aXXbYc")
	f.Add(`\**`, "*abc")
	f.Add("*?*", "é")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		g, err := CompileGlob(pattern)
		if err != nil || len(g.toks) > 12 || len(s) > 24 {
			return
		}
		toks := g.toks
		if g.kind != globGeneral {
			toks = mustToks(pattern)
		}
		if got, want := g.Match(s), refMatch(toks, []rune(s)); got != want {
			t.Fatalf("glob %q on %q: %v, reference %v", pattern, s, got, want)
		}
	})
}

func mustToks(pattern string) []globTok {
	var toks []globTok
	rs := []rune(pattern)
	for i := 0; i < len(rs); i++ {
		switch rs[i] {
		case '*':
			toks = append(toks, globTok{kind: tokAny})
		case '?':
			toks = append(toks, globTok{kind: tokOne})
		case '\\':
			i++
			toks = append(toks, globTok{r: rs[i]})
		default:
			toks = append(toks, globTok{r: rs[i]})
		}
	}
	return toks
}

func refMatch(toks []globTok, s []rune) bool {
	if len(toks) == 0 {
		return len(s) == 0
	}
	switch t := toks[0]; t.kind {
	case tokAny:
		for i := 0; i <= len(s); i++ {
			if refMatch(toks[1:], s[i:]) {
				return true
			}
		}
		return false
	case tokOne:
		return len(s) > 0 && refMatch(toks[1:], s[1:])
	default:
		return len(s) > 0 && s[0] == t.r && refMatch(toks[1:], s[1:])
	}
}
