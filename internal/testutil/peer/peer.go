// Package peer decides what a test does when a real peer it needs (Postfix,
// Sendmail, redis-server, MIMEDefang, miltertest, Chromium, systemd, root,
// a system user) is not there.
//
// A skipped test is not a passed test. With SLUICE_REQUIRE_PEERS=1 (which
// scripts/test.sh sets when it runs as root or in CI, where it installs
// every peer) a missing peer fails the test, naming what is missing and how
// to get it. Without it the test is skipped with a line that starts with
// "SKIP (peer missing)", and scripts/test.sh lists every skipped test at
// the end of its run. A differential test whose reference is missing
// checks sluice's side and then ends skipped too (Partial): only a test
// that compared both sides passes.
package peer

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"sync"
	"testing"
)

// EnvRequire is the environment variable that turns a missing peer into a
// test failure.
const EnvRequire = "SLUICE_REQUIRE_PEERS"

// Required reports whether a missing peer fails the test
// (SLUICE_REQUIRE_PEERS is set to anything but "" or "0").
func Required() bool {
	v := os.Getenv(EnvRequire)
	return v != "" && v != "0"
}

// Missing ends the test because what (a peer, in words: "redis-server",
// "MIMEDefang's mimedefang-multiplexor") cannot be had; why says how it
// failed and how to get it. Under SLUICE_REQUIRE_PEERS it fails the test,
// otherwise it skips it loudly.
func Missing(tb testing.TB, what string, why error) {
	tb.Helper()
	msg := failIfRequired(tb, what, why)
	tb.Skipf("SKIP (peer missing): %s", msg)
}

// failIfRequired fails the test under SLUICE_REQUIRE_PEERS and otherwise
// returns what is missing and why, in one line.
func failIfRequired(tb testing.TB, what string, why error) string {
	tb.Helper()
	msg := what
	if why != nil {
		msg = fmt.Sprintf("%s: %v", what, why)
	}
	if Required() {
		tb.Fatalf("required peer missing (%s=1): %s", EnvRequire, msg)
	}
	return msg
}

// Binary returns the path of the first of names found on PATH or as an
// absolute path, or ends the test with Missing, naming the Debian package
// that provides it.
func Binary(tb testing.TB, pkg string, names ...string) string {
	tb.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Missing(tb, names[0], fmt.Errorf("not installed (Debian package %s; scripts/test.sh installs it as root)", pkg))
	return ""
}

// Root ends the test with Missing unless it runs as root; why says what
// needs root.
func Root(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Missing(tb, "root", fmt.Errorf("%s (run scripts/test.sh as root)", why))
	}
}

// User returns the named system user, or ends the test with Missing.
func User(tb testing.TB, name string) *user.User {
	tb.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		Missing(tb, "user "+name, err)
		return nil
	}
	return u
}

// Group returns the named system group, or ends the test with Missing.
func Group(tb testing.TB, name string) *user.Group {
	tb.Helper()
	g, err := user.LookupGroup(name)
	if err != nil {
		Missing(tb, "group "+name, err)
		return nil
	}
	return g
}

// Partial is for a test that can still check its own side when what (the
// reference side of a differential test, say) is missing. Under
// SLUICE_REQUIRE_PEERS it fails the test at once. Otherwise the test goes
// on and checks what it has, and then ends SKIPPED with the reason (a
// failure of its own side still fails it): a test that compared nothing
// did not pass, and scripts/test.sh's closing list of skipped tests names
// it. Calling it again in the same test adds nothing.
//
// The skip is made by a cleanup (tb.Cleanup), so call Partial from the
// test or subtest that does the checking, never from a test whose
// parallel subtests run after it returns: Go 1.26 drops the result line
// of a test that skips in a cleanup run after its parallel subtests.
func Partial(tb testing.TB, what string, why error) {
	tb.Helper()
	msg := failIfRequired(tb, what, why)
	partialMu.Lock()
	first := !partial[tb]
	partial[tb] = true
	partialMu.Unlock()
	if !first {
		tb.Logf("PARTIAL (peer missing) again: %s", msg)
		return
	}
	tb.Logf("PARTIAL (peer missing, only sluice's side is checked): %s", msg)
	tb.Cleanup(func() {
		partialMu.Lock()
		delete(partial, tb)
		partialMu.Unlock()
		if !tb.Failed() {
			tb.Skipf("SKIP (peer missing, only sluice's side checked): %s", msg)
		}
	})
}

// partial holds the tests Partial has already set to end skipped.
var (
	partialMu sync.Mutex
	partial   = map[testing.TB]bool{}
)
