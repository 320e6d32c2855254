package cli

import (
	"log/slog"
	"os"
	"runtime"
)

// setProcs sets GOMAXPROCS. The package's tests, which run many daemons
// in one test binary, replace it: the count is the process's, not a
// daemon's.
var setProcs = runtime.GOMAXPROCS

// applyProcs sets how many threads run Go code, as the configuration's
// procs says (0: Go's default, one per CPU), unless the GOMAXPROCS
// environment variable is set: that wins, as in any Go program.
func applyProcs(procs int, log *slog.Logger) {
	if env := os.Getenv("GOMAXPROCS"); env != "" {
		log.Debug("threads running Go code: GOMAXPROCS from the environment", "GOMAXPROCS", env)
		return
	}
	if procs > 0 {
		setProcs(procs)
		log.Debug("threads running Go code", "procs", procs)
	}
}
