package aggregator

import (
	"reflect"
	"unsafe"
)

// A tracked (room, user) pair is the state there are millions of, so its
// windows are laid out after it in one allocation, a pairWin each, and
// found by arithmetic: the pair needs no slice of them (three words) and
// they need no pointer back to it (a word each). That makes a pair and
// three windows 176 bytes.
//
// The allocation's type is built once per aggregator, for its number of
// windows, so that the collector knows where every pointer in it is; a
// pointer to any window keeps the whole block alive, as a pointer into any
// Go object does.
type pairBlock struct{ typ reflect.Type }

const (
	pairSize    = unsafe.Sizeof(pair{})
	pairWinSize = unsafe.Sizeof(pairWin{})
)

func newPairBlock(windows int) pairBlock {
	typ := reflect.StructOf([]reflect.StructField{
		{Name: "P", Type: reflect.TypeFor[pair]()},
		{Name: "W", Type: reflect.ArrayOf(windows, reflect.TypeFor[pairWin]())},
	})
	if typ.Field(1).Offset != pairSize {
		panic("aggregator: a pair's windows do not follow it")
	}
	return pairBlock{typ}
}

// make allocates a zero pair with its windows.
func (pb pairBlock) make() *pair {
	return (*pair)(reflect.New(pb.typ).UnsafePointer())
}

// win is p's window i.
func (p *pair) win(i int) *pairWin {
	return (*pairWin)(unsafe.Add(unsafe.Pointer(p), pairSize+uintptr(i)*pairWinSize))
}

// pairOf is the pair whose window i is pw.
func (pw *pairWin) pairOf(i int) *pair {
	return (*pair)(unsafe.Add(unsafe.Pointer(pw), -int(pairSize+uintptr(i)*pairWinSize)))
}
