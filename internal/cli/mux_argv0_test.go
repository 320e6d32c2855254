package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil/muxref"
)

// Invoked under the reference's name, sluice's command line answers
// byte for byte as the reference's does: -v prints exactly its version
// line (no sluice identity) on stdout with status 0, -h and -v act where
// getopt meets them (what follows is never parsed), and errors carry
// argv[0] as given. Both run with the same argv[0]; sluice through a
// link named mimedefang-multiplexor.
func TestMuxAsReferenceCommandLineVsReference(t *testing.T) {
	bin, _ := muxBinaries(t)
	ref := muxref.Mux(t)
	link := filepath.Join(t.TempDir(), ReferenceName)
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	run := func(path, argv0 string, args []string) (code int, stdout, stderr string) {
		var out, errb bytes.Buffer
		cmd := &exec.Cmd{Path: path, Args: append([]string{argv0}, args...), Stdout: &out, Stderr: &errb}
		code = exitCode(t, cmd.Run())
		return code, out.String(), errb.String()
	}
	cases := [][]string{
		{"-v"}, {"-vD"}, {"-v", "extra"}, {"-v", "-j"}, {"-j", "-v"},
		{"-x", "abc", "-v"}, {"-v", "-x", "abc"}, {"-E", "-v"},
		{"-q", "500", "-v"}, {"-v", "-q", "500"}, {"-h", "-v"}, {"-v", "-h"}, {"-h", "-j"},
		{"-D", "-q", "200"}, {"-D", "-m"},
	}
	for _, argv0 := range []string{referenceMux, ReferenceName, "./" + ReferenceName} {
		for _, args := range cases {
			rc, rout, rerr := run(ref, argv0, args)
			sc, sout, serr := run(link, argv0, args)
			if sc != rc || sout != rout || serr != rerr {
				t.Errorf("argv0 %q %q:\n sluice    %d stdout %q stderr %q\n reference %d stdout %q stderr %q",
					argv0, args, sc, sout, head(serr), rc, rout, head(rerr))
			}
		}
	}
	// sluice's own identity stays with its own name.
	if code, out, _ := run(bin, "sluice", []string{"mux", "-v"}); code != 0 || !strings.HasPrefix(out, "mimedefang-multiplexor version 3.3 (sluice ") {
		t.Errorf("sluice mux -v: %d %q", code, out)
	}
}

// head is the first 300 bytes of s, for messages.
func head(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
