package lease

import "testing"

// Rendezvous moves only what it must: a member that leaves gives up its
// own partitions and no others; one that joins takes some from each and
// moves nothing between the others; and the split is fair.
func TestOwnerMovesLittle(t *testing.T) {
	const n = 64
	three := []string{"a", "b", "c"}
	before := map[int]string{}
	count := map[string]int{}
	for p := range n {
		before[p] = OwnerOf(p, three)
		count[before[p]]++
	}
	for _, m := range three {
		if count[m] < 10 {
			t.Errorf("%s owns only %d of %d: %v", m, count[m], n, count)
		}
	}
	moved := 0
	for p := range n {
		after := OwnerOf(p, []string{"a", "c"})
		switch {
		case before[p] == "b":
			moved++
		case after != before[p]:
			t.Errorf("partition %d moved from %s to %s though its owner stayed", p, before[p], after)
		}
	}
	if moved != count["b"] {
		t.Errorf("moved %d, want %d", moved, count["b"])
	}
	for p := range n {
		after := OwnerOf(p, []string{"a", "b", "c", "d"})
		if after != "d" && after != before[p] {
			t.Errorf("partition %d moved from %s to %s when d joined", p, before[p], after)
		}
	}
	// Order of the member list does not matter.
	for p := range n {
		if OwnerOf(p, []string{"c", "a", "b"}) != before[p] {
			t.Fatalf("partition %d: owner depends on order", p)
		}
	}
}
