// Package archtest enforces the import direction of docs/architecture.md ("Dependencies") over
// `go list -deps`: protocol front ends -> governor -> limiter -> store.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "sluice/internal/"

var frontEnds = []string{"anvil", "policy", "milter", "milter/wire", "mux", "socketmap", "throttle", "web", "netserve"}

// forbidden lists, per package prefix, what it must not depend on.
var forbidden = map[string][]string{
	"limiter":  append([]string{"governor", "store", "app", "cli", "config"}, frontEnds...),
	"governor": append([]string{"app", "cli", "config", "store"}, frontEnds...),
	"store":    append([]string{"governor", "app", "cli", "config"}, frontEnds...),
	"config":   append([]string{"governor", "store", "app", "cli", "netserve"}, frontEnds...),
	"clock":    {"limiter", "governor", "store", "app", "cli", "config"},
	"hostmask": {"limiter", "governor", "store", "app", "cli", "config"},
}

func init() {
	for _, fe := range frontEnds {
		forbidden[fe] = []string{"limiter", "store", "governor", "app", "cli", "config"}
	}
}

func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}:{{join .Deps \" \"}}", "sluice/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, ":")
		rel, ok := strings.CutPrefix(pkg, mod)
		if !ok {
			continue
		}
		for prefix, bad := range forbidden {
			if rel != prefix && !strings.HasPrefix(rel, prefix+"/") {
				continue
			}
			checked++
			for _, d := range strings.Fields(deps) {
				drel, ok := strings.CutPrefix(d, mod)
				if !ok {
					continue
				}
				for _, b := range bad {
					if drel == b || strings.HasPrefix(drel, b+"/") {
						t.Errorf("%s imports %s (directly or not): not allowed", pkg, d)
					}
				}
			}
		}
		// Only cli imports app; only cmd imports cli.
		for _, d := range strings.Fields(deps) {
			if d == mod+"app" && rel != "cli" {
				t.Errorf("%s imports app; only cli may", pkg)
			}
		}
	}
	if checked < 6 {
		t.Fatalf("checked only %d packages: is the module layout as expected?", checked)
	}
}
