package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/chatpulse/chatpulse/snapshot"
)

// A local copy of the newest snapshot, kept in a directory beside the
// embedded NATS server's store (docs/snapshots.md, "After a crash").
//
// After a SIGKILL the embedded server rebuilds its stream index before it
// answers anything, and that is most of a crash restart; loading the
// snapshot from the object store could only start after it. A copy on
// disk can be loaded meanwhile (Preload), and is kept only if the object
// store holds that very snapshot (its id, which the store gave it) and
// the stream agrees with it (Keeper.restore): nothing is answered from a
// copy the store or the stream contradicts.

// localMagic starts a local copy; the store's id of the object follows,
// then a newline, then the snapshot as the store holds it.
const localMagic = "chatpulse snapshot copy\n"

// localPath is where the copy of the snapshot name is kept in dir.
func localPath(dir, name string) string { return filepath.Join(dir, name+".snapshot") }

// writeLocal keeps data, saved in the store under name with id, in dir:
// whole or not at all (a rename), so that a crash while it writes leaves
// the copy before.
func writeLocal(dir, name, id string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone once renamed
	_, err = f.WriteString(localMagic + id + "\n")
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), localPath(dir, name))
}

// readLocal reads the copy of the snapshot name kept in dir.
func readLocal(dir, name string) (id string, data []byte, err error) {
	b, err := os.ReadFile(localPath(dir, name))
	if err != nil {
		return "", nil, err
	}
	rest, ok := bytes.CutPrefix(b, []byte(localMagic))
	i := bytes.IndexByte(rest, '\n')
	if !ok || i < 1 {
		return "", nil, errors.New("not a local copy of a snapshot")
	}
	return string(rest[:i]), rest[i+1:], nil
}

// A Preload is a job's local copy being loaded into its stages, on a
// goroutine of its own (StartPreload), until Keeper.restore takes it.
type Preload struct {
	done chan struct{}
	// Set before done is closed:
	id   string
	snap *snapshot.Snapshot // the stages' sequences; their bytes dropped
	err  error              // nil: the stages hold it
	size int
}

// StartPreload loads the copy of job's snapshot kept in dir into job's
// stages, fresh ones, if the copy was taken under config, of stream.
// Nothing else may touch the stages until Wait returns.
func StartPreload(dir string, job Job, config, stream string) *Preload {
	p := &Preload{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = p.load(dir, job, config, stream)
	}()
	return p
}

func (p *Preload) load(dir string, job Job, config, stream string) error {
	id, data, err := readLocal(dir, job.Name)
	if err != nil {
		return err
	}
	snap, err := snapshot.Decode(data)
	if err != nil {
		return err
	}
	if err := taken(snap, config, stream); err != nil {
		return err
	}
	if err := loadStages(job, snap); err != nil {
		return err
	}
	p.id, p.size = id, len(data)
	for i := range snap.Stages {
		snap.Stages[i].Agg, snap.Stages[i].Thr = nil, nil // loaded: not kept twice
	}
	p.snap = snap
	return nil
}

// Wait returns once the preload is over (p may be nil: none).
func (p *Preload) Wait() {
	if p != nil {
		<-p.done
	}
}

// loadStages loads snap's stages into job's of the same name, all or
// none.
func loadStages(job Job, snap *snapshot.Snapshot) error {
	byName := map[string]*snapshot.Stage{}
	for i := range snap.Stages {
		byName[snap.Stages[i].Name] = &snap.Stages[i]
	}
	for _, s := range job.Stages {
		st := byName[s.Name]
		if st == nil {
			continue
		}
		if err := s.load(st.Agg, st.Thr); err != nil {
			job.reset()
			return fmt.Errorf("stage %s: %w", s.Name, err)
		}
	}
	return nil
}

// taken says why snap was not taken under config, of stream (nil: it
// was).
func taken(snap *snapshot.Snapshot, config, stream string) error {
	switch {
	case snap.Config != config:
		return errors.New("taken under other windows, policies or partitions")
	case snap.Stream != stream:
		return fmt.Errorf("of stream %s, not %s", snap.Stream, stream)
	}
	return nil
}
