// Command postfixanvil runs a private Postfix instance whose master serves
// Postfix's own anvil(8), for benchmarks that compare another anvil server
// against it. It must run as root.
//
// Once the instance is up it prints one line, "socket=<path>", naming the
// anvil socket (master starts anvil itself on the first connection). It then
// stays up until SIGINT or SIGTERM, or until stdin reaches end of file when
// stdin is a pipe, and stops the instance before exiting.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sluice/internal/testutil/postfixtest"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func realMain(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("postfixanvil", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the instance (default: a new temporary directory, removed at exit)")
	startTimeout := fs.Duration("start-timeout", 30*time.Second, "how long to wait for the instance to start")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "postfixanvil: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "postfixanvil-")
		if err != nil {
			fmt.Fprintf(stderr, "postfixanvil: %v\n", err)
			return 1
		}
		defer os.RemoveAll(d)
		*dir = d
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if isPipe(stdin) {
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			stop()
		}()
	}

	startCtx, cancel := context.WithTimeout(ctx, *startTimeout)
	inst, err := postfixtest.Start(startCtx, postfixtest.Options{
		Dir:      *dir,
		SMTPPort: 0,
		OwnAnvil: true,
	})
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "postfixanvil: starting Postfix: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "socket=%s\n", inst.AnvilSocketPath())

	<-ctx.Done()
	if err := inst.Stop(); err != nil {
		fmt.Fprintf(stderr, "postfixanvil: stopping Postfix: %v\n", err)
		return 1
	}
	return 0
}

// isPipe reports whether f is a pipe or FIFO, so that its end of file means
// the parent went away (a terminal or /dev/null does not).
func isPipe(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}
