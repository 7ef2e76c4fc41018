package web

import "testing"

func TestWithoutAsOf(t *testing.T) {
	in := `{"window":"1m","as_of":"2026-11-30T07:00:00.123Z","messages":3}`
	if got := string(withoutAsOf([]byte(in))); got != `{"window":"1m","as_of":"","messages":3}` {
		t.Fatal(got)
	}
}
