// Command qmail-remote is bantest's stand-in for qmail's qmail-remote:
// qmail-remote host sender recip..., the message on stdin, the relay in
// $BANTEST_RELAY; it prints qmail-remote's report.
package main

import (
	"os"

	"sluice/internal/throttle/bantest"
)

func main() {
	os.Exit(bantest.QmailRemote(os.Getenv(bantest.RelayEnv), os.Args[1:], os.Stdin, os.Stdout))
}
