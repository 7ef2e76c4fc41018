package aggregator

import (
	"reflect"
	"unsafe"
)

// Pairs and users are the state there are millions of, so each one's
// windows are laid out after it in one allocation, a per-window struct
// each, and found by arithmetic: the key needs no slice of them (three
// words) and they need no pointer back to it (a word each). That makes a
// pair and three windows 176 bytes, and a user and three windows 120.
//
// The allocation's type is built once per aggregator, for its number of
// windows, so that the collector knows where every pointer in it is; a
// pointer to any window keeps the whole block alive, as a pointer into any
// Go object does.
type block[K, W any] struct{ typ reflect.Type }

func newBlock[K, W any](windows int) block[K, W] {
	typ := reflect.StructOf([]reflect.StructField{
		{Name: "K", Type: reflect.TypeFor[K]()},
		{Name: "W", Type: reflect.ArrayOf(windows, reflect.TypeFor[W]())},
	})
	if typ.Field(1).Offset != reflect.TypeFor[K]().Size() {
		panic("aggregator: a key's windows do not follow it")
	}
	return block[K, W]{typ}
}

// make allocates a zero key with its windows.
func (b block[K, W]) make() *K {
	return (*K)(reflect.New(b.typ).UnsafePointer())
}

// winAt is key k's window i.
func winAt[W, K any](k *K, i int) *W {
	var w W
	return (*W)(unsafe.Add(unsafe.Pointer(k), unsafe.Sizeof(*k)+uintptr(i)*unsafe.Sizeof(w)))
}

// keyAt is the key whose window i is w.
func keyAt[K, W any](w *W, i int) *K {
	var k K
	return (*K)(unsafe.Add(unsafe.Pointer(w), -int(unsafe.Sizeof(k)+uintptr(i)*unsafe.Sizeof(*w))))
}

func (p *pair) win(i int) *pairWin     { return winAt[pairWin](p, i) }
func (pw *pairWin) pairOf(i int) *pair { return keyAt[pair](pw, i) }
func (u *user) win(i int) *userWin     { return winAt[userWin](u, i) }
func (uw *userWin) userOf(i int) *user { return keyAt[user](uw, i) }
