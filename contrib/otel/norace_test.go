//go:build !race

package stampedeotel_test

const raceEnabled = false
