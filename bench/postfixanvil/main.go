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
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"sluice/bench/internal/postfixrun"
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

	o := postfixtest.Options{Dir: *dir, SMTPPort: 0, OwnAnvil: true}
	return postfixrun.Run("postfixanvil", o, *startTimeout, stdin, stdout, stderr,
		func(inst *postfixtest.Instance) string { return "socket=" + inst.AnvilSocketPath() })
}
