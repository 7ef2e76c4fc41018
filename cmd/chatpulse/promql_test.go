package main

import (
	"slices"
	"testing"
)

// promqlNames returns the metric names a PromQL expression reads, in
// order. It is a lexer, not a parser, and is enough for the queries under
// deploy/ (Grafana's $variables included): strings, label matchers {...}
// and ranges [...] are skipped whole, and so are the label lists after
// by, without, on, ignoring, group_left and group_right; of the other
// identifiers, a function or aggregation is followed by "(" or is a known
// aggregation (sum by (x) (...)), a keyword is known, and the rest are
// metric names. Numbers and durations start with a digit.
func promqlNames(expr string) []string {
	var names []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{':
			i = skipPast(expr, i, '}')
		case c == '[':
			i = skipPast(expr, i, ']')
		case c == '$' || c >= '0' && c <= '9' || c == '.':
			i = endOfWord(expr, i+1)
		case isNameStart(c):
			j := endOfWord(expr, i)
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			opens := k < len(expr) && expr[k] == '('
			switch {
			case promqlLabelLists[word] && opens:
				j = skipPast(expr, k, ')')
			case opens, promqlLabelLists[word], promqlKeywords[word]:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

var (
	promqlLabelLists = setOf("by", "without", "on", "ignoring", "group_left", "group_right")
	promqlKeywords   = setOf("bool", "and", "or", "unless", "offset", "atan2", "inf", "Inf", "nan", "NaN",
		"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio")
)

func setOf(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	return m
}

func isNameStart(c byte) bool { return c == '_' || c == ':' || c|0x20 >= 'a' && c|0x20 <= 'z' }

func endOfWord(s string, i int) int {
	for i < len(s) && (isNameStart(s[i]) || s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	return i
}

// skipPast returns the index just after the first end at or after i.
func skipPast(s string, i int, end byte) int {
	for i < len(s) && s[i] != end {
		i++
	}
	return i + 1
}

func TestPromqlNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up{job="chatpulse"} == 0`, []string{"up"}},
		{"sum by (job, instance) (rate(a_total[5m]))\n  > 0.01 * sum by (job, instance) (rate(b_total[5m]))", []string{"a_total", "b_total"}},
		{`min by (instance) (chatpulse_ready{job=~"$job", instance=~"$instance"})`, []string{"chatpulse_ready"}},
		{`x * on(instance) group_left sum(y)`, []string{"x", "y"}},
		{`x / ignoring (le) group_right (a, b) y`, []string{"x", "y"}},
		{`increase(a_total[$__rate_interval] offset 1h) > bool 0`, []string{"a_total"}},
		{`label_replace(m, "dst", "$1", "src", "(.*)") or vector(1e3)`, []string{"m"}},
		{`sum without (le) (h_bucket) unless count(c:rule) and topk(3, d)`, []string{"h_bucket", "c:rule", "d"}},
		{`histogram_quantile(0.99, sum by (le) (rate(lat_bucket[5m]))) > Inf`, []string{"lat_bucket"}},
	} {
		if got := promqlNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("promqlNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}
