package aggregator

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The pair table against a Go map, through growth, runs that wrap around
// the end of the array, deletions in the middle of runs, and shrinking.
func TestPairTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rooms := map[string]*room{}
	users := map[string]*user{}
	key := func() (string, string) {
		return fmt.Sprint("r", r.IntN(30)), fmt.Sprint("u", r.IntN(300))
	}
	tab := newPairTable()
	model := map[[2]string]*pair{}
	for step := range 100_000 {
		rn, un := key()
		p, h := tab.get(rn, un)
		if p != model[[2]string{rn, un}] {
			t.Fatalf("step %d: get(%s, %s) = %p, want %p", step, rn, un, p, model[[2]string{rn, un}])
		}
		switch {
		case p == nil && (step/10_000)%2 == 0: // phases of growth and of decay
			if rooms[rn] == nil {
				rooms[rn] = &room{name: rn}
			}
			if users[un] == nil {
				users[un] = &user{}
				users[un].setName(un)
			}
			p = &pair{room: rooms[rn], user: users[un]}
			tab.put(h, p)
			model[[2]string{rn, un}] = p
		case p != nil && r.IntN(3) == 0:
			tab.delete(p)
			delete(model, [2]string{rn, un})
		}
		if tab.n != len(model) {
			t.Fatalf("step %d: %d pairs, want %d", step, tab.n, len(model))
		}
		if 4*tab.n > 3*len(tab.slots) || (8*tab.n < len(tab.slots) && len(tab.slots) > minSlots) {
			t.Fatalf("step %d: %d pairs in %d slots", step, tab.n, len(tab.slots))
		}
	}
	for k, p := range model {
		if got, _ := tab.get(k[0], k[1]); got != p {
			t.Fatalf("%v: %p, want %p", k, got, p)
		}
	}
}
