package muxref

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// script writes an executable shell script.
func script(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeDpkgDivert puts on PATH a dpkg-divert whose --truename answers
// X.distrib for the paths in diverted and X for others.
func fakeDpkgDivert(t *testing.T, diverted ...string) {
	t.Helper()
	dir := t.TempDir()
	var cases strings.Builder
	for _, d := range diverted {
		cases.WriteString("\"" + d + "\") echo \"$2.distrib\"; exit 0;;\n")
	}
	script(t, filepath.Join(dir, "dpkg-divert"), "[ \"$1\" = --truename ] || exit 2\ncase \"$2\" in\n"+cases.String()+"esac\necho \"$2\"\n")
	t.Setenv("PATH", dir+":/usr/bin:/bin")
}

// TestFind: the diverted binary when there is a diversion (also found by
// its name alone where dpkg-divert is missing), links resolved; sluice
// refused, whether it shows its Go build information or only answers as
// sluice; a missing binary named with its Debian package, and what is
// not an executable file refused.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	ref := filepath.Join(dir, "ref")
	script(t, ref, "echo 'Usage: mimedefang-multiplexor [options]'\n")
	sluiceLike := filepath.Join(dir, "sluice-like")
	script(t, sluiceLike, "echo 'usage: sluice <command> [flags]'\n")
	self, err := os.Executable() // this test binary: a Go program of module sluice
	if err != nil {
		t.Fatal(err)
	}
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := link("plain", ref)
	diverted := link("diverted", self)
	link("diverted.distrib", ref)
	goLink := link("go", self)
	behaves := link("behaves", sluiceLike)
	fakeDpkgDivert(t, diverted)

	for _, c := range []struct {
		path, want, err string
	}{
		{plain, ref, ""},
		{diverted, ref, ""},
		{goLink, "", goLink + " -> " + self + " is a Go program (module sluice, go"},
		{behaves, "", behaves + " -> " + sluiceLike + ` answers as sluice when invoked as sluice ("usage: sluice <command> [flags]")`},
		{filepath.Join(dir, "missing"), "", "(Debian package mimedefang"},
		{"/dev/null", "", "/dev/null is not an executable file"},
	} {
		got, err := find(c.path)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("find(%s) = %q, %v; want %q and an error with %q", c.path, got, err, c.want, c.err)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if got, err := find(diverted); got != ref || err != nil {
		t.Errorf("without dpkg-divert: find(%s) = %q, %v; want %q", diverted, got, err, ref)
	}
}

// TestFindOnThisHost: the reference found on this host is Debian's C
// binary, the diverted one when docs/mux.md's drop-in is in place (as
// scripts/test.sh puts it as root); Command runs it under its installed
// name, and anything else as exec.Command does.
func TestFindOnThisHost(t *testing.T) {
	if cmd := Command(t, "/bin/true", "x"); cmd.Path != "/bin/true" || strings.Join(cmd.Args, " ") != "/bin/true x" {
		t.Errorf("Command(/bin/true x): path %s args %q", cmd.Path, cmd.Args)
	}
	for _, path := range []string{MultiplexorPath, CtlPath} {
		got, err := Find(path)
		if err != nil {
			peer.Missing(t, "the reference "+filepath.Base(path), err)
		}
		// -s: md-mx-ctrl -h also dials its socket, never the host's.
		if cmd := Command(t, path, "-s", "/nonexistent/muxref.sock", "-h"); cmd.Path != got || cmd.Args[0] != path {
			t.Errorf("Command(%s -h): path %s args %q, want path %s", path, cmd.Path, cmd.Args, got)
		} else if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "Usage: "+filepath.Base(path)) {
			t.Errorf("%s -h printed %q", path, out)
		}
		out, err := exec.Command("dpkg-divert", "--truename", path).Output()
		if err != nil {
			t.Logf("no dpkg-divert: %v", err)
			continue
		}
		want, _ := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
		if got != want {
			t.Errorf("Find(%s) = %s, want %s (dpkg-divert --truename)", path, got, want)
		}
		t.Logf("%s: the reference is %s", path, got)
	}
}
