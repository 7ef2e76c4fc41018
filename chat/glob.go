package chat

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A Glob is a compiled pattern of room or user names (a throttle policy's
// rooms, an exemption's users): '*' matches any run of characters
// (including none, and including '/'), '?' exactly one character, and
// '\' makes the next character literal; '[' and ']' are reserved and must
// be escaped. Matching is on the whole name, case-sensitive.
type Glob struct {
	literal string // the pattern, unescaped, when it has no wildcard
	prefix  string // the literal part before a single trailing '*'
	kind    globKind
	toks    []globTok
}

type globKind uint8

const (
	globLiteral globKind = iota
	globPrefix           // literal prefix then '*'
	globGeneral
)

type globTok struct {
	r    rune // the literal rune, for tokLit
	kind uint8
}

const (
	tokLit uint8 = iota
	tokOne       // '?'
	tokAny       // '*'
)

// CompileGlob compiles pattern, or says what is wrong with it.
func CompileGlob(pattern string) (Glob, error) {
	if pattern == "" {
		return Glob{}, fmt.Errorf("empty pattern")
	}
	if !utf8.ValidString(pattern) {
		return Glob{}, fmt.Errorf("invalid UTF-8")
	}
	var toks []globTok
	for i := 0; i < len(pattern); {
		r, size := utf8.DecodeRuneInString(pattern[i:])
		i += size
		switch r {
		case '*':
			if len(toks) == 0 || toks[len(toks)-1].kind != tokAny {
				toks = append(toks, globTok{kind: tokAny})
			}
		case '?':
			toks = append(toks, globTok{kind: tokOne})
		case '[', ']':
			return Glob{}, fmt.Errorf("character classes are not supported (write \\%c for a literal %c)", r, r)
		case '\\':
			if i == len(pattern) {
				return Glob{}, fmt.Errorf("trailing backslash")
			}
			r, size = utf8.DecodeRuneInString(pattern[i:])
			i += size
			toks = append(toks, globTok{r: r})
		default:
			toks = append(toks, globTok{r: r})
		}
	}
	var lit strings.Builder
	n := 0
	for _, t := range toks {
		if t.kind != tokLit {
			break
		}
		lit.WriteRune(t.r)
		n++
	}
	switch {
	case n == len(toks):
		return Glob{kind: globLiteral, literal: lit.String()}, nil
	case n == len(toks)-1 && toks[n].kind == tokAny:
		return Glob{kind: globPrefix, prefix: lit.String()}, nil
	}
	return Glob{kind: globGeneral, toks: toks}, nil
}

// Match reports whether s matches the glob.
func (g *Glob) Match(s string) bool {
	switch g.kind {
	case globLiteral:
		return s == g.literal
	case globPrefix:
		return strings.HasPrefix(s, g.prefix)
	}
	// The classic wildcard walk: on a mismatch, let the last '*' swallow
	// one more character and retry from there. O(len(s)·len(toks)) at worst.
	toks := g.toks
	p, i := 0, 0
	star, starI := -1, 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if p < len(toks) {
			switch t := toks[p]; {
			case t.kind == tokAny:
				star, starI = p, i
				p++
				continue
			case t.kind == tokOne || t.r == r:
				p++
				i += size
				continue
			}
		}
		if star < 0 {
			return false
		}
		_, size = utf8.DecodeRuneInString(s[starI:])
		starI += size
		p, i = star+1, starI
	}
	for p < len(toks) && toks[p].kind == tokAny {
		p++
	}
	return p == len(toks)
}
