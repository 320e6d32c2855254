package pool

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// The exec shim for -R and -M (docs/protocols/mimedefang-multiplexor.md, "Resource limits"). The reference calls setrlimit in
// the child between fork and exec; Go cannot run code there, so a worker
// with limits is started as /proc/self/exe (this very program) with
// shimEnv in its environment. This package's init sees it before anything
// else runs, removes it from the environment, sets the limits and execs
// the real worker with the argv it was given. No shell is involved.
//
// The variable's value is "<rss>,<as>,<sigpipe>,<program>": the limits in
// bytes (0: none), "1" when SIGPIPE was ignored in the parent (the shim
// keeps it ignored, since an exec'd Go program would otherwise reset it),
// and the worker's absolute path.
const shimEnv = "SLUICE_POOL_RLIMIT_EXEC"

func shimEnvValue(cfg *Config) string {
	pipe := "0"
	if signal.Ignored(syscall.SIGPIPE) {
		pipe = "1"
	}
	return fmt.Sprintf("%s=%d,%d,%s,%s", shimEnv, cfg.RLimitRSS, cfg.RLimitAS, pipe, cfg.Program)
}

func init() {
	if v, ok := os.LookupEnv(shimEnv); ok {
		os.Exit(runShim(v))
	}
}

// runShim sets the limits and execs the worker; it returns (an exit
// status of 1, as the reference's child exits when exec fails) only on
// failure.
func runShim(v string) int {
	os.Unsetenv(shimEnv)
	f := strings.SplitN(v, ",", 4)
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "sluice worker shim: bad %s value %q\n", shimEnv, v)
		return 1
	}
	rss, err1 := strconv.ParseUint(f[0], 10, 64)
	as, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "sluice worker shim: bad %s value %q\n", shimEnv, v)
		return 1
	}
	if f[2] == "1" {
		signal.Ignore(syscall.SIGPIPE)
	}
	setLimit := func(name string, res int, n uint64) {
		lim := syscall.Rlimit{Cur: n, Max: n}
		if err := syscall.Setrlimit(res, &lim); err != nil {
			// The reference logs these as warnings; a worker's stderr
			// reaches the log with -l.
			fmt.Fprintf(os.Stderr, "setrlimit(%s, %d) failed: %v\n", name, n, err)
		}
	}
	if rss > 0 {
		setLimit("RLIMIT_RSS", rlimitRSS, rss)
	}
	if as > 0 {
		setLimit("RLIMIT_AS", syscall.RLIMIT_AS, as)
		setLimit("RLIMIT_DATA", syscall.RLIMIT_DATA, as)
	}
	err := syscall.Exec(f[3], os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "exec %s: %v\n", f[3], err)
	return 1
}

// rlimitRSS is Linux's RLIMIT_RSS, which package syscall does not name.
const rlimitRSS = 5
