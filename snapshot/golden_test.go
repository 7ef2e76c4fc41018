package snapshot

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "write the golden snapshots of testdata/ anew")

// goldenSnapshots are the snapshots testdata/ keeps, as this code wrote
// them: an empty one, and testSnapshot with a stage of the largest
// sequence and parts whose lengths take two bytes.
func goldenSnapshots() map[string]*Snapshot {
	s := testSnapshot()
	long := make([]byte, 300)
	for i := range long {
		long[i] = byte(i)
	}
	s.Stages = append(s.Stages, Stage{Name: "long", Seq: math.MaxUint64, Agg: long, Thr: long[:200]})
	return map[string]*Snapshot{"snapshot-empty": {}, "snapshot": s}
}

// A snapshot written today is, byte for byte, the one written when
// testdata/ was, and what testdata/ holds decodes to the snapshot it was
// written from: the format does not change unseen.
//
//	go test ./snapshot/ -run Golden -update   # after a change of the format
func TestGoldenSnapshots(t *testing.T) {
	for name, s := range goldenSnapshots() {
		path := filepath.Join("testdata", name+".golden")
		b := s.Append(nil)
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		golden, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, golden) {
			t.Errorf("%s: written today as\n%x\nnot as testdata holds it\n%x", name, b, golden)
		}
		got, err := Decode(golden)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range s.Stages { // Decode leaves empty parts nil
			if len(s.Stages[i].Agg) == 0 {
				s.Stages[i].Agg = got.Stages[i].Agg
			}
			if len(s.Stages[i].Thr) == 0 {
				s.Stages[i].Thr = got.Stages[i].Thr
			}
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("%s: decoded %+v, want %+v", name, got, s)
		}
	}
}
