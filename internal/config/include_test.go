package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// writeTree writes files (name -> content) under a new directory and
// returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestIncludeMerges: the fragments of include_dir merge in name order:
// a new class goes before the catch-all, a class of the same name is
// changed in place, a policy rule of the same name too, a later scalar
// or list replaces the earlier, and files not named *.toml are ignored.
func TestIncludeMerges(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"sluice.toml": "include_dir = \"conf.d\"\n[[class]]\nname = \"local\"\nmatch = [\"127.0.0.0/8\"]\n[[class]]\nname = \"everyone\"\nmatch = [\"*\"]\nrefuse = 200\n" +
			"[milter]\nlisten = [\"unix:milter\"]\n[[policy.rule]]\nname = \"r\"\ncount = \"messages\"\nkey = [\"sender\"]\nlimit = [\"10/1m\"]\n",
		"conf.d/20-milter.toml": "[[class]]\nname = \"dialup\"\nmatch = [\"198.51.100.0/24\"]\nrefuse = 5\n[[class]]\nname = \"everyone\"\nrefuse = 300\n[milter]\nlisten = [\"unix:other\"]\nworkers = 3\n",
		"conf.d/10-policy.toml": "[[policy.rule]]\nname = \"r\"\nlimit = [\"20/1m\"]\n[[policy.rule]]\nname = \"s\"\ncount = \"messages\"\nkey = [\"client_address\"]\nlimit = [\"5/1m\"]\n",
		"conf.d/README":         "not read",
		"conf.d/.hidden.toml":   "not = read",
	})
	c, errs := Load(filepath.Join(dir, "sluice.toml"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if want := []string{filepath.Join(dir, "conf.d", "10-policy.toml"), filepath.Join(dir, "conf.d", "20-milter.toml")}; !slices.Equal(c.Included, want) {
		t.Errorf("included %v, want %v", c.Included, want)
	}
	var names []string
	for _, cl := range c.Classes {
		names = append(names, fmt.Sprintf("%s:%d", cl.Name, cl.Refuse))
	}
	if got := strings.Join(names, " "); got != "local:0 dialup:5 everyone:300" {
		t.Errorf("classes %s", got)
	}
	if c.Milter.Listen[0] != "unix:other" || len(c.Milter.Listen) != 1 || c.Milter.Workers != 3 {
		t.Errorf("milter %v %d", c.Milter.Listen, c.Milter.Workers)
	}
	if len(c.Policy.Rules) != 2 || c.Policy.Rules[0].Name != "r" || c.Policy.Rules[0].Limit[0] != "20/1m" || c.Policy.Rules[1].Name != "s" {
		t.Errorf("policy rules %+v", c.Policy.Rules)
	}
}

// TestIncludeMalformed: what is wrong with the include directory or a
// file in it is one error naming the file (and line).
func TestIncludeMalformed(t *testing.T) {
	many := map[string]string{"sluice.toml": "include_dir = \"d\"\n"}
	for i := range MaxIncludes + 1 {
		many[fmt.Sprintf("d/%03d.toml", i)] = ""
	}
	for _, c := range []struct {
		name  string
		files map[string]string
		setup func(dir string) error
		want  string
	}{
		{"not a string", map[string]string{"sluice.toml": "include_dir = 3\n"}, nil, "sluice.toml:1: include_dir: expected a directory path"},
		{"empty", map[string]string{"sluice.toml": "\n\ninclude_dir = \"\"\n"}, nil, "sluice.toml:3: include_dir: expected a directory path"},
		{"missing", map[string]string{"sluice.toml": "include_dir = \"nowhere\"\n"}, nil, "sluice.toml:1: include_dir: nowhere: no such file or directory"},
		{"syntax", map[string]string{"sluice.toml": "include_dir = \"d\"\n", "d/a.toml": "[milter]\nworkers = = 3\n"}, nil, "d/a.toml:2: syntax error"},
		{"unknown key", map[string]string{"sluice.toml": "include_dir = \"d\"\n", "d/a.toml": "\n[milter]\nwrokers = 3\n"}, nil, "d/a.toml:3: milter.wrokers: unknown key"},
		{"symlink", map[string]string{"sluice.toml": "include_dir = \"d\"\n", "d/x": ""}, func(dir string) error {
			return os.Symlink(filepath.Join(dir, "sluice.toml"), filepath.Join(dir, "d", "a.toml"))
		}, "a.toml"},
		{"fifo", map[string]string{"sluice.toml": "include_dir = \"d\"\n", "d/x": ""}, func(dir string) error {
			return syscall.Mkfifo(filepath.Join(dir, "d", "a.toml"), 0o644)
		}, "a.toml"},
		{"too many", many, nil, fmt.Sprintf("more than %d entries", MaxIncludes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTree(t, c.files)
			if c.setup != nil {
				if err := c.setup(dir); err != nil {
					t.Fatal(err)
				}
			}
			_, errs := Load(filepath.Join(dir, "sluice.toml"))
			if len(errs) == 0 {
				t.Fatalf("no error, want %q", c.want)
			}
			got := strings.ReplaceAll(errs[0].Error(), dir+"/", "")
			if !strings.Contains(got, c.want) {
				t.Errorf("%s, want %q", got, c.want)
			}
		})
	}
}
