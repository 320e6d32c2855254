package cli

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
)

// setProcs sets GOMAXPROCS. The package's tests, which run many daemons
// in one test binary, replace it: the count is the process's, not a
// daemon's.
var setProcs = runtime.GOMAXPROCS

// applyProcs sets how many threads run Go code, as the configuration's
// procs says (0: Go's default), unless the GOMAXPROCS environment
// variable does: a count in it wins, as in any Go program (the runtime
// ignores anything else there, and so does this).
func applyProcs(procs int, log *slog.Logger) {
	env := os.Getenv("GOMAXPROCS")
	if n, err := strconv.Atoi(env); err == nil && n > 0 {
		log.Debug("threads running Go code: GOMAXPROCS from the environment", "GOMAXPROCS", n)
		return
	}
	if procs > 0 {
		setProcs(procs)
		log.Debug("threads running Go code", "procs", procs)
	}
}
