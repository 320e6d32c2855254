// Command sluice is the mail traffic governor; see README.md. Invoked as
// mimedefang-multiplexor it is `sluice mux`, a drop-in replacement.
package main

import (
	"context"
	"os"

	"sluice/internal/cli"
)

func main() {
	args := os.Args[1:]
	if sub := cli.Invoked(os.Args[0]); sub != "" {
		args = append([]string{sub}, args...)
	}
	os.Exit(cli.Main(context.Background(), args, os.Stdout, os.Stderr))
}
