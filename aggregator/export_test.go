package aggregator

import "testing"

// SetStateChunk makes Finish write n users at a time, and run yield each
// time it lets events in, until the test ends.
func SetStateChunk(t testing.TB, n int, yield func()) {
	old, oldYield := stateChunk, stateYield
	stateChunk, stateYield = n, yield
	t.Cleanup(func() { stateChunk, stateYield = old, oldYield })
}
