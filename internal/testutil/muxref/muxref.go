// Package muxref finds the reference the multiplexor's differential tests
// compare sluice with: Debian's mimedefang-multiplexor and md-mx-ctrl
// (package mimedefang), and proves that what it found is the reference.
//
// On a host that followed docs/mux.md's drop-in, /usr/bin/mimedefang-
// multiplexor and /usr/bin/md-mx-ctrl are links to sluice and Debian's
// binaries are the diverted X.distrib (dpkg-divert --local --rename): a
// test that trusted the path would compare sluice with sluice and pass.
// Find follows the diversion and the links, and refuses a program that is
// sluice: one that carries Go build information (the reference is C and
// has none), or that answers as sluice when invoked as sluice.
package muxref

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
)

// The paths Debian's package mimedefang installs the reference programs
// at (before any diversion).
const (
	MultiplexorPath = "/usr/bin/mimedefang-multiplexor"
	CtlPath         = "/usr/bin/md-mx-ctrl"
)

// Mux returns the path of the real mimedefang-multiplexor, or ends the
// test with peer.Missing (a failure under SLUICE_REQUIRE_PEERS, naming
// what was found; otherwise a skip).
func Mux(tb testing.TB) string {
	tb.Helper()
	return must(tb, MultiplexorPath)
}

// Ctl returns the path of the real md-mx-ctrl, or ends the test as Mux
// does.
func Ctl(tb testing.TB) string {
	tb.Helper()
	return must(tb, CtlPath)
}

// MuxPartial returns the path of the real mimedefang-multiplexor or, when
// there is none, "" after peer.Partial: the test checks sluice's side
// alone and ends skipped (under SLUICE_REQUIRE_PEERS it fails).
func MuxPartial(tb testing.TB) string {
	tb.Helper()
	p, err := Find(MultiplexorPath)
	if err != nil {
		peer.Partial(tb, "the reference "+filepath.Base(MultiplexorPath), err)
		return ""
	}
	return p
}

// Command is exec.Command(argv[0], argv[1:]...), except that a reference
// program named by its installed path (MultiplexorPath, CtlPath) runs
// from where Find finds the real one, still under that name (argv[0]):
// what it prints is then what it prints on a host without the drop-in. A
// missing or fake reference ends the test as Mux does. Tests start the
// reference through Command or CommandContext, never by its path alone.
func Command(tb testing.TB, argv ...string) *exec.Cmd {
	tb.Helper()
	return CommandContext(context.Background(), tb, argv...)
}

// CommandContext is Command with exec.CommandContext's ctx.
func CommandContext(ctx context.Context, tb testing.TB, argv ...string) *exec.Cmd {
	tb.Helper()
	if argv[0] != MultiplexorPath && argv[0] != CtlPath {
		return exec.CommandContext(ctx, argv[0], argv[1:]...)
	}
	cmd := exec.CommandContext(ctx, must(tb, argv[0]), argv[1:]...)
	cmd.Args[0] = argv[0]
	return cmd
}

func must(tb testing.TB, path string) string {
	tb.Helper()
	p, err := Find(path)
	if err != nil {
		peer.Missing(tb, "the reference "+filepath.Base(path), err)
	}
	return p
}

// found caches Find's answers: the binaries do not change during a run.
var found sync.Map // path -> result

type result struct {
	path string
	err  error
}

// Find returns the real program Debian's package installs as path (an
// absolute path such as MultiplexorPath): the diverted file if dpkg-divert
// has diverted path (X.distrib for docs/mux.md's diversion), else path;
// with its symbolic links resolved. It is an error, naming what was
// found, when that program is missing or is sluice.
func Find(path string) (string, error) {
	if r, ok := found.Load(path); ok {
		return r.(result).path, r.(result).err
	}
	p, err := find(path)
	found.Store(path, result{p, err})
	return p, err
}

func find(path string) (string, error) {
	name, how := trueName(path)
	resolved, err := filepath.EvalSymlinks(name)
	if err != nil {
		return "", fmt.Errorf("%s%s: %w (Debian package mimedefang; scripts/test.sh installs it as root)", name, how, err)
	}
	if resolved != name {
		how += " -> " + resolved
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s%s is not an executable file (%v)", name, how, fileMode(fi, err))
	}
	if bi, err := buildinfo.ReadFile(resolved); err == nil {
		return "", fmt.Errorf("%s%s is a Go program (module %s, %s), not Debian's %s, a C program: docs/mux.md's drop-in puts sluice at %s and keeps Debian's binary at %s.distrib (dpkg-divert --local --rename)",
			name, how, bi.Main.Path, bi.GoVersion, filepath.Base(path), path, path)
	}
	if out, ok := answersAsSluice(resolved); ok {
		return "", fmt.Errorf("%s%s answers as sluice when invoked as sluice (%q), not as Debian's %s", name, how, out, filepath.Base(path))
	}
	return resolved, nil
}

// fileMode describes what os.Stat found, for error messages.
func fileMode(fi os.FileInfo, err error) string {
	if err != nil {
		return err.Error()
	}
	return fi.Mode().String()
}

// trueName is where path's contents really are: the diverted name if
// dpkg-divert diverted path (or, with no dpkg-divert to ask, path.distrib
// when that exists), else path; how says which, for error messages.
func trueName(path string) (name, how string) {
	if out, err := exec.Command("dpkg-divert", "--truename", path).Output(); err == nil {
		if t := strings.TrimSpace(string(out)); t != "" && t != path {
			return t, " (" + path + " is diverted there)"
		}
		return path, ""
	}
	if _, err := os.Lstat(path + ".distrib"); err == nil {
		return path + ".distrib", " (found beside " + path + "; no dpkg-divert to ask)"
	}
	return path, ""
}

// answersAsSluice runs prog with argv[0] "sluice" and "-s <a path that
// does not exist> -h", which the reference programs answer with their own
// usage (md-mx-ctrl then fails to reach that socket: -s keeps it off the
// host's multiplexor) and sluice with its command list, and reports
// whether the answer is sluice's.
func answersAsSluice(prog string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, "-s", "/nonexistent/sluice-muxref.sock", "-h")
	cmd.Args[0] = "sluice"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Run(); err != nil && !errors.As(err, new(*exec.ExitError)) {
		return "", false
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(strings.ToLower(line), "usage: sluice") {
			return line, true
		}
	}
	return "", false
}
