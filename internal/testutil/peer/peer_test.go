package peer

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// childEnv names the scenario a child run of this test binary plays
// (TestPeerChild); unset, TestPeerChild does nothing.
const childEnv = "SLUICE_PEER_CHILD"

// TestPeerChild is run by the tests below in a child process of this test
// binary, one scenario per run; in the ordinary run it does nothing.
func TestPeerChild(t *testing.T) {
	gone := errors.New("not installed")
	switch os.Getenv(childEnv) {
	case "partial":
		Partial(t, "the reference", gone)
		t.Log("sluice's side checked")
	case "partial-twice":
		Partial(t, "the reference", gone)
		Partial(t, "the reference", gone)
		t.Log("sluice's side checked")
	case "partial-fails":
		Partial(t, "the reference", gone)
		t.Error("sluice's side is wrong")
	case "partial-subtests":
		for _, name := range []string{"a", "b"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				Partial(t, "the reference", gone)
				t.Log("sluice's side checked")
			})
		}
	case "missing":
		Missing(t, "the reference", gone)
		t.Log("went on after Missing")
	}
}

// child runs TestPeerChild in scenario with SLUICE_REQUIRE_PEERS=require
// and returns its verbose output (what go test -json, and so gotestsum,
// reads its SKIP, FAIL and PASS from).
func child(t *testing.T, scenario, require string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+scenario, EnvRequire+"="+require)
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// results are the "--- RESULT: Name" lines of a verbose test run, sorted
// (parallel subtests report in whichever order they end).
func results(out string) []string {
	var r []string
	for _, m := range regexp.MustCompile(`(?m)^\s*--- (\w+): (\S+)`).FindAllStringSubmatch(out, -1) {
		r = append(r, m[1]+" "+m[2])
	}
	slices.Sort(r)
	return r
}

// TestPartial: a test whose reference is missing checks its own side and
// ends SKIPPED with the reason (once, however often it says so), FAILs if
// its own side is wrong, and under SLUICE_REQUIRE_PEERS fails at once.
// In parallel subtests each subtest is skipped and the parent passes.
func TestPartial(t *testing.T) {
	for _, c := range []struct {
		scenario, require string
		results           []string
		has, hasNot       []string
	}{
		{"partial", "0", []string{"SKIP TestPeerChild"},
			[]string{"sluice's side checked", "SKIP (peer missing, only sluice's side checked): the reference: not installed"}, nil},
		{"partial-twice", "", []string{"SKIP TestPeerChild"}, []string{"sluice's side checked"}, nil},
		{"partial-fails", "0", []string{"FAIL TestPeerChild"}, []string{"sluice's side is wrong"}, nil},
		{"partial-subtests", "0", []string{"PASS TestPeerChild", "SKIP TestPeerChild/a", "SKIP TestPeerChild/b"},
			[]string{"SKIP (peer missing, only sluice's side checked)"}, nil},
		{"partial", "1", []string{"FAIL TestPeerChild"},
			[]string{"required peer missing (SLUICE_REQUIRE_PEERS=1): the reference: not installed"}, []string{"sluice's side checked"}},
		{"missing", "0", []string{"SKIP TestPeerChild"}, []string{"SKIP (peer missing): the reference: not installed"}, []string{"went on"}},
		{"missing", "1", []string{"FAIL TestPeerChild"}, []string{"required peer missing"}, []string{"went on"}},
	} {
		out := child(t, c.scenario, c.require)
		got := results(out)
		if strings.Join(got, ", ") != strings.Join(c.results, ", ") {
			t.Errorf("%s with %s=%q: results %q, want %q; output:\n%s", c.scenario, EnvRequire, c.require, got, c.results, out)
		}
		if n := strings.Count(out, "SKIP (peer missing"); c.scenario == "partial-twice" && n != 1 {
			t.Errorf("partial-twice: %d skip lines, want 1:\n%s", n, out)
		}
		for _, s := range c.has {
			if !strings.Contains(out, s) {
				t.Errorf("%s with %s=%q: output lacks %q:\n%s", c.scenario, EnvRequire, c.require, s, out)
			}
		}
		for _, s := range c.hasNot {
			if strings.Contains(out, s) {
				t.Errorf("%s with %s=%q: output has %q:\n%s", c.scenario, EnvRequire, c.require, s, out)
			}
		}
	}
}
