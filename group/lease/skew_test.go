package lease

import (
	"maps"
	"testing"
	"time"
)

// The group's clock is the median of the members' offsets; a member
// further than max-skew from it is named, with how far.
func TestSkews(t *testing.T) {
	m := func(offset int64) Member { return Member{Clock: 1, Offset: offset} }
	cases := []struct {
		name    string
		members map[string]Member
		median  int64
		off     map[string]int64
	}{
		{name: "none says its clock", members: map[string]Member{"a": {}, "b": {}}},
		{name: "all close", members: map[string]Member{"a": m(10), "b": m(-20), "c": m(300)}, median: 10},
		{name: "one fast", members: map[string]Member{"a": m(10), "b": m(-20), "c": m(9000)}, median: 10, off: map[string]int64{"c": 8990}},
		{name: "one slow, one silent", members: map[string]Member{"a": m(10), "b": m(-7000), "c": m(20), "d": {}}, median: 10, off: map[string]int64{"b": -7010}},
		{name: "two: the one ahead", members: map[string]Member{"a": m(0), "b": m(6000)}, median: 0, off: map[string]int64{"b": 6000}},
	}
	for _, c := range cases {
		median, off := Skews(c.members, 5*time.Second)
		if median != c.median || !maps.Equal(off, c.off) {
			t.Errorf("%s: median %d, off %v; want %d, %v", c.name, median, off, c.median, c.off)
		}
	}
}
