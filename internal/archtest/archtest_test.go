package archtest

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const mod = "sluice/internal/"

var frontEnds = []string{"anvil", "policy", "milter", "milter/wire", "mux", "socketmap", "throttle", "web", "netserve", "control"}

// forbidden lists, per package prefix, what it must not depend on.
var forbidden = map[string][]string{
	"limiter":  append([]string{"governor", "store", "app", "cli", "config"}, frontEnds...),
	"governor": append([]string{"app", "cli", "config", "store", "ban"}, frontEnds...),
	// ban, the throttle's ban guard, sits beside the governor: no door
	// (the throttle front end judges the lines), no config, no store.
	"ban": append([]string{"app", "cli", "config", "store", "governor"}, frontEnds...),
	// markset is the marks overlay both governor and ban use.
	"markset": append([]string{"governor", "ban", "store", "app", "cli", "config"}, frontEnds...),
	"store":   append([]string{"governor", "app", "cli", "config"}, frontEnds...),
	"config":  append([]string{"limiter", "governor", "store", "app", "cli", "netserve"}, frontEnds...),
	// rules is the vocabulary every layer shares: it imports nothing of sluice's.
	"rules": append([]string{"limiter", "governor", "store", "app", "cli", "config", "hostmask", "clock"}, frontEnds...),
	// limittable reads a file format: rules and safefs, nothing above.
	"limittable": append([]string{"limiter", "governor", "store", "app", "cli", "config", "hostmask", "clock"}, frontEnds...),
	// rawio is a leaf every door's I/O may use.
	"rawio": append([]string{"limiter", "governor", "store", "app", "cli", "config", "rules"}, frontEnds...),
	// confwatch watches files and calls a reload: nothing of sluice's.
	"confwatch": append([]string{"limiter", "governor", "store", "app", "cli", "config"}, frontEnds...),
	// postconf reads Postfix's configuration: config, nothing above.
	"postconf": append([]string{"limiter", "governor", "store", "app", "cli"}, frontEnds...),
	"clock":    {"limiter", "governor", "store", "app", "cli", "config"},
	"hostmask": {"limiter", "governor", "store", "app", "cli", "config"},
	// muxd, the multiplexor daemon, sits beside app: pool and its doors,
	// no limiter.
	"muxd": {"limiter", "governor", "store", "app", "cli"},
	// The multiplexor's side: nothing of the governor's side, none of the
	// daemons; pool is imported by its doors, never the other way.
	"pool":       {"limiter", "governor", "store", "config", "app", "muxd", "cli", "mux", "socketmap"},
	"poolstatus": {"limiter", "governor", "store", "config", "app", "muxd", "cli"},
	"percent":    {"limiter", "governor", "store", "config", "app", "muxd", "cli"},
	"dropq":      {"limiter", "governor", "store", "config", "app", "muxd", "cli"},
	"muxctl":     {"limiter", "governor", "store", "config", "app", "muxd", "cli"},
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
		// Only cli imports app and muxd; only cmd imports cli.
		for _, d := range strings.Fields(deps) {
			if (d == mod+"app" || d == mod+"muxd") && rel != "cli" {
				t.Errorf("%s imports %s; only cli may", pkg, d)
			}
			if d == mod+"cli" && !strings.HasPrefix(pkg, "sluice/cmd/") {
				t.Errorf("%s imports cli (directly or not); only cmd may", pkg)
			}
		}
	}
	if checked < 6 {
		t.Fatalf("checked only %d packages: is the module layout as expected?", checked)
	}
}

// cliForbidden are the packages below app that the command line must
// reach through app, not import itself.
var cliForbidden = []string{"pool", "mux", "socketmap", "limiter", "metrics", "governor", "store"}

// TestCLIImportsAppLevel: the command line imports app-level packages
// only (app, and muxd for the multiplexor daemon). The check is per file
// and on direct imports, since cli reaches everything through app.
func TestCLIImportsAppLevel(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}\t{{join .GoFiles \" \"}}", mod+"cli").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dir, files, _ := strings.Cut(strings.TrimSpace(string(out)), "\t")
	checked := 0
	for _, name := range strings.Fields(files) {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			rel, ok := strings.CutPrefix(path, mod)
			if !ok {
				continue
			}
			for _, b := range cliForbidden {
				if rel == b || strings.HasPrefix(rel, b+"/") {
					t.Errorf("cli/%s imports %s: reach it through app", name, path)
				}
			}
		}
	}
	if checked < 3 {
		t.Fatalf("checked only %d cli files: is the layout as expected?", checked)
	}
}
