// Command sluice is the mail traffic governor; see README.md. Invoked as
// mimedefang-multiplexor it is `sluice mux`, and as md-mx-ctrl `sluice
// ctl`: drop-in replacements for MIMEDefang's programs.
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
