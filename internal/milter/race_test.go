//go:build race

package milter

const raceEnabled = true
