// Package postfixrun keeps a private Postfix instance up for a benchmark
// script (bench/postfixanvil, milterload postfix): started, announced on
// stdout, and stopped when the script says so or goes away.
package postfixrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sluice/internal/testutil/postfixtest"
)

// Run starts an instance with o, allowing it startTimeout, prints
// ready(instance) on stdout as one line, and keeps the instance up until
// SIGINT or SIGTERM, or until stdin reaches end of file when stdin is a
// pipe (a script's liveness pipe: its end means the script went away);
// then it stops the instance. Failures are described on stderr after
// prog's name. It returns the exit status: 0, or 1 if the instance could
// not be started or stopped.
func Run(prog string, o postfixtest.Options, startTimeout time.Duration, stdin *os.File, stdout, stderr io.Writer,
	ready func(*postfixtest.Instance) string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if IsPipe(stdin) {
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			stop()
		}()
	}
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	inst, err := postfixtest.Start(startCtx, o)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "%s: starting Postfix: %v\n", prog, err)
		return 1
	}
	fmt.Fprintln(stdout, ready(inst))
	<-ctx.Done()
	if err := inst.Stop(); err != nil {
		fmt.Fprintf(stderr, "%s: stopping Postfix: %v\n", prog, err)
		return 1
	}
	return 0
}

// IsPipe reports whether f is a pipe or FIFO, so that its end of file
// means the parent went away (a terminal or /dev/null does not).
func IsPipe(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}
