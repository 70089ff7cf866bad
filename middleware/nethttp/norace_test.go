//go:build !race

package guardhttp_test

// raceEnabled: the race detector is on (its frames are larger).
const raceEnabled = false
