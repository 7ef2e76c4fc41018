package engine

import (
	"os"
	"testing"

	"github.com/chatpulse/chatpulse/snapshot"
)

// A local copy is read back as written, and any file in its place is read
// without a panic: a copy found on disk is input like any other.
func FuzzLocalCopy(f *testing.F) {
	f.Add([]byte(localMagic + "id\nsnapshot"))
	f.Add([]byte(localMagic + "\n"))
	f.Add([]byte("chatpulse"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := writeLocal(dir, "s", "id", b); err != nil {
			t.Fatal(err)
		}
		if id, data, err := readLocal(dir, "s"); err != nil || id != "id" || string(data) != string(b) {
			t.Fatalf("read back: %q, %q, %v; want id, %q", id, data, err, b)
		}
		if err := os.WriteFile(localPath(dir, "s"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, data, err := readLocal(dir, "s"); err == nil {
			snapshot.Decode(data)
		}
	})
}
