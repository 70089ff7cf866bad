//go:build !race

package stampedeprom_test

const raceEnabled = false
