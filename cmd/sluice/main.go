// Command sluice is the mail traffic governor; see README.md.
package main

import (
	"context"
	"os"

	"sluice/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
