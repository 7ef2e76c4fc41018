package throttle

import "unsafe"

// unsafeString is how a caller might hand over a reused buffer without a copy.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
