package ingest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// genPayload builds a random payload in random field order and spacing.
// Half are clean: good parts only, so most of them are accepted (unless ts
// is too far ahead). The others draw from good and bad parts alike, and a
// third of those are then mutated.
func genPayload(r *rand.Rand) []byte {
	g := gen{r: r, clean: r.IntN(2) == 0}
	type field struct{ key, val string }
	var fields []field
	add := func(p float64, keys []string, val func() string) {
		if r.Float64() < p {
			fields = append(fields, field{g.pick(keys), val()})
		}
	}
	name := func() string { return g.pick(genGoodNames, genBadNames) }
	add(0.95, []string{`"room"`, `"room"`, `"room"`, `"r\u006fom"`, `"Room"`}, name)
	add(0.95, []string{`"user"`, `"user"`, `"user"`, `"\u0075ser"`, `"USER"`}, name)
	add(0.7, []string{`"ts"`, `"ts"`, `"ts"`, `"t\u0073"`}, g.ts)
	add(0.3, []string{`"type"`}, func() string { return g.pick(genGoodTypes, genBadTypes) })
	add(0.7, []string{`"text"`}, func() string {
		if r.IntN(4) == 0 {
			return g.value(0)
		}
		return g.pick(genGoodTexts, genBadTexts)
	})
	add(0.7, []string{`"id"`, `"id"`, `"\u0069d"`, `"ID"`}, func() string {
		if r.IntN(4) == 0 {
			return g.pick(genGoodIDs)
		}
		return fmt.Sprintf(`"m-%d"`, r.IntN(1e6))
	})
	add(0.3, []string{`"mentions"`, `"mentions"`, `"m\u0065ntions"`, `"Mentions"`}, func() string {
		if r.IntN(4) == 0 {
			return g.value(0)
		}
		return g.mentions()
	})
	for range r.IntN(3) {
		add(1, []string{`"x"`, `""`, `"meta"`, `"\u00e9"`, "\"k\xff\""}, func() string { return g.value(0) })
	}
	if !g.clean && len(fields) > 0 && r.IntN(10) == 0 {
		fields = append(fields, fields[r.IntN(len(fields))])
	}
	if r.IntN(200) == 0 {
		pad := MaxPayload - 50 + r.IntN(100)
		if g.clean {
			pad = 60000
		}
		fields = append(fields, field{`"pad"`, `"` + strings.Repeat("p", pad) + `"`})
	}
	r.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	ws := func() string {
		if r.IntN(4) > 0 {
			return ""
		}
		return pick(r, []string{" ", "\n", "\t", "\r\n  "})
	}
	var b strings.Builder
	b.WriteString(ws() + "{")
	for i, f := range fields {
		if i > 0 {
			b.WriteString(ws() + ",")
		}
		b.WriteString(ws() + f.key + ws() + ":" + ws() + f.val + ws())
	}
	b.WriteString("}" + ws())
	data := []byte(b.String())
	if !g.clean && r.IntN(3) == 0 {
		data = mutate(r, data)
	}
	return data
}

var (
	genGoodNames = []string{`"lobby"`, `"a"`, `"support-eu"`, `"café"`, `"lo\u0062by"`, `"\ud83d\ude00"`, `"😀"`,
		`"` + strings.Repeat("r", 128) + `"`, `"` + strings.Repeat("é", 64) + `"`, `"a\\b\/c\"d"`, `"\uFFFD"`}
	genBadNames = []string{`""`, `"` + strings.Repeat("r", 129) + `"`, `"` + strings.Repeat("é", 65) + `"`,
		`"` + strings.Repeat(`\u00e9`, 64) + `x"`, `"a\u0007"`, `"\t"`, "\"a\x7f\"", `"\u0085"`, "\"\u0085\"", "\"\xff\"",
		"\"a\xc3\"", "\"\xed\xa0\x80\"", `"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\ud800\ud800"`, `null`, `5`, `true`,
		`{}`, `["a"]`, "\"a\tb\"", `"\u00"`, `"\q"`}
	genGoodTypes = []string{`"message"`, `"join"`, `"leave"`, `""`, `"Message"`, `"messag\u0065"`, `"jo\u0069n"`, `null`, `"\ud800"`, `"edit"`}
	genGoodIDs   = []string{`"$dtXi6jxhHU4W8Eq_CgVwEdb_0UUleRCD8E-brmnsb6I"`, `""`, `"m\u002d1"`, "\"a\xffb\"", `"x\ud800"`, `null`, `184467`, `{"a":[1]}`, `[]`, `true`}
	genBadTypes  = []string{`1`, `[]`, `true`, `{}`}
	genGoodTexts = []string{`"hi there, how is everyone doing today?"`, `""`, `"a\nb\u00e9\ud83d\ude00"`, `"x\ud800y"`,
		"\"a\xffb\"", "\"\x7f\u0085\"", `null`, `12.5`, `{"a":[1]}`, `"\"quoted\" \\ \/ \b\f\r\t"`}
	genBadTexts = []string{"\"raw\nnewline\"", `"\x"`, `"\u12"`, `"unterminated`, `'single'`}
)

// mentions returns a mentions array: names that repeat, escapes, invalid
// bytes, elements that are not strings, and unless clean, broken ones.
func (g gen) mentions() string {
	elems := append(append([]string{}, genGoodNames...), genGoodIDs...)
	var b strings.Builder
	b.WriteString("[")
	for i := range g.r.IntN(20) {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(g.pick(elems, genBadTexts))
	}
	b.WriteString("]")
	return b.String()
}

// gen draws the parts of one payload: good ones only when clean, else good
// and bad alike.
type gen struct {
	r     *rand.Rand
	clean bool
}

func (g gen) pick(good []string, bad ...[]string) string {
	if !g.clean && len(bad) > 0 && g.r.IntN(2) == 0 {
		return pick(g.r, bad[0])
	}
	return pick(g.r, good)
}

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

// ts returns a ts value: valid RFC 3339 strings and integers around now,
// at the range ends or anywhere, and unless clean, broken variants.
func (g gen) ts() string {
	r := g.r
	var at int64
	switch r.IntN(5) {
	case 0, 1:
		at = testNow + r.Int64N(20000) - 10000
	case 2:
		at = r.Int64N(MaxTS)
	case 3:
		at = []int64{MinTS, MaxTS}[r.IntN(2)] + r.Int64N(2000) - 1000
	default:
		at = r.Int64N(2*MaxTS) - MaxTS/2
	}
	if g.clean {
		at = min(max(at, MinTS), testNow+2*testSkew)
	}
	switch k := r.IntN(12); {
	case k == 0:
		return strconv.FormatInt(at, 10)
	case k == 1 && g.clean:
		return `null`
	case k == 1:
		return strconv.FormatInt(at, 10) + pick(r, []string{".0", ".5", "e0", "E+2", "e-1"})
	case g.clean:
	case k == 2:
		return pick(r, []string{`null`, `true`, `{}`, `[1]`, `"yesterday"`, `""`, `-0`, `99999999999999999999`, `01`})
	case k == 3:
		// Corrupt one character of a valid timestamp.
		s := []byte(randomTimestamp(r, at))
		s[r.IntN(len(s))] = pick(r, []string{"0", "9", "3", "6", "2", "-", ":", "T", "t", "Z", "z", "+", ".", ",", " "})[0]
		return strconv.Quote(string(s))
	case k == 4:
		return `"` + pick(r, []string{"2026-02-29T00:00:00Z", "2024-02-29T12:00:00Z", "1900-02-29T00:00:00Z",
			"2000-02-29T00:00:00Z", "2026-11-30T24:00:00Z", "2016-12-31T23:59:60Z", "2026-11-30T07:00:00+24:00",
			"2026-11-30T07:00:00+23:59", "2026-11-30T07:00:00-00:60", "2026-11-30T7:00:00Z", "2026-11-30T07:00:00,5Z",
			"2026-11-30T07:00:00\\u002e5Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z"}) + `"`
	}
	s := randomTimestamp(r, at)
	if g.clean && (s < "1970" || s > "9999") {
		return strconv.FormatInt(at, 10) // an offset moved it out of range
	}
	return `"` + s + `"`
}

// value returns a random JSON value for ignored fields, unless clean
// sometimes nested past MaxDepth or broken.
func (g gen) value(depth int) string {
	r := g.r
	switch r.IntN(10) {
	case 0:
		if r.IntN(30) == 0 {
			n := MaxDepth - 4 + r.IntN(8)
			if g.clean {
				n = MaxDepth - 2
			}
			return strings.Repeat("[", n) + strings.Repeat("]", n)
		}
		fallthrough
	case 1:
		if depth > 4 {
			return "[]"
		}
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, g.value(depth+1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case 2:
		if depth > 4 {
			return "{}"
		}
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, fmt.Sprintf(`"k%d":%s`, r.IntN(3), g.value(depth+1)))
		}
		return "{" + strings.Join(parts, ",") + "}"
	case 3:
		return g.pick([]string{"0", "-1", "1.5", "-0.0e-7", "1E+400", "123456789012345678901234567890"},
			[]string{"-", "1.", ".5", "1e", "0x1F", "+1", "00"})
	case 4:
		return g.pick([]string{"true", "false", "null"}, []string{"tru", "nul", "True"})
	default:
		return g.pick(genGoodTexts, genBadTexts)
	}
}

// mutate changes one to four bytes of data, or cuts it short.
func mutate(r *rand.Rand, data []byte) []byte {
	data = bytes.Clone(data)
	const alphabet = "{}[],:\"\\ 09-.eEtfnul\x00\x1f\x7f\x80\xc3\xff"
	for range 1 + r.IntN(4) {
		if len(data) == 0 {
			return data
		}
		i := r.IntN(len(data))
		switch r.IntN(5) {
		case 0:
			data[i] = alphabet[r.IntN(len(alphabet))]
		case 1:
			data = append(data[:i], data[i+1:]...)
		case 2:
			data = append(data[:i], append([]byte{alphabet[r.IntN(len(alphabet))]}, data[i:]...)...)
		case 3:
			data = data[:i]
		default:
			j := i + r.IntN(len(data)-i)
			data = append(data[:j], append(bytes.Clone(data[i:j]), data[j:]...)...)
		}
	}
	return data
}
