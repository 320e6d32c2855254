package cli

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

func TestBuildVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "e0d93070f41319ea4846e9d60fae3c14726b5be4"},
		{Key: "vcs.time", Value: "2026-11-26T21:40:57Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	if got, want := buildVersion(bi), "(devel) e0d93070f413 2026-11-26T21:40:57Z modified (go1.26.8)"; got != want {
		t.Errorf("buildVersion = %q, want %q", got, want)
	}
	bi.Settings = nil
	bi.Main.Version = "v1.2.3"
	if got, want := buildVersion(bi), "v1.2.3 (go1.26.8)"; got != want {
		t.Errorf("buildVersion = %q, want %q", got, want)
	}
}

// TestVersionShowsRevision: a binary built from a clean checkout (a
// clone of this repository) with the revision Go embeds (-buildvcs=true:
// the default outside an environment that turns it off) says which
// commit it is.
func TestVersionShowsRevision(t *testing.T) {
	git := peer.Binary(t, "git", "git")
	src := filepath.Join(t.TempDir(), "src")
	if out, err := exec.Command(git, "clone", "-q", recipe.Root(), src).CombinedOutput(); err != nil {
		peer.Missing(t, "a git checkout of sluice", fmt.Errorf("%v: %s", err, out))
	}
	out, err := exec.Command(git, "-C", src, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	rev := strings.TrimSpace(string(out))[:12]
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/sluice")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), " "+rev+" ") || strings.Contains(string(out), "modified") {
		t.Errorf("sluice version: %q %v, want the revision %s, not modified", out, err, rev)
	}
}
