package lease

import (
	"slices"
	"time"
)

// Skews is the group's clock, the median of the members' offsets from the
// server's (Member.Offset; the lower of the middle two when even, so
// that of two members the one ahead is named), and the members further
// than maxSkew from it, by how far.
func Skews(members map[string]Member, maxSkew time.Duration) (median int64, off map[string]int64) {
	var offs []int64
	for _, m := range members {
		if m.Clock != 0 {
			offs = append(offs, m.Offset)
		}
	}
	if len(offs) == 0 {
		return 0, nil
	}
	slices.Sort(offs)
	median = offs[(len(offs)-1)/2]
	for name, m := range members {
		if d := m.Offset - median; m.Clock != 0 && (d > maxSkew.Milliseconds() || -d > maxSkew.Milliseconds()) {
			if off == nil {
				off = map[string]int64{}
			}
			off[name] = d
		}
	}
	return median, off
}

// logSkew logs each member whose clock becomes further than maxSkew from
// the group's, and when it comes back.
func (l *Loop) logSkew(t *Table) {
	if l.maxSkew <= 0 {
		return
	}
	_, off := Skews(t.Members, l.maxSkew)
	for name, d := range off {
		if _, was := l.skewed[name]; !was {
			l.log.Warn("group: a member's clock is off from the group's by more than --max-skew; views are not read at its time", "member", name, "offset", time.Duration(d)*time.Millisecond, "max_skew", l.maxSkew)
		}
	}
	for name := range l.skewed {
		if _, is := off[name]; !is {
			if _, live := t.Members[name]; live {
				l.log.Info("group: a member's clock is back within --max-skew of the group's", "member", name)
			}
		}
	}
	l.skewed = off
}
