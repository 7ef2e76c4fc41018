//go:build !race

package throttle

const raceEnabled = false
