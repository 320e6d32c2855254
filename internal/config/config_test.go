package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expected .err files")

func TestGoodFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.toml")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		c, errs := Load(f)
		if len(errs) > 0 {
			t.Errorf("%s: %v", f, errs)
			continue
		}
		if _, errs := c.ClassTable(); len(errs) > 0 {
			t.Errorf("%s: classes: %v", f, errs)
		}
	}
}

func TestFullFile(t *testing.T) {
	c, errs := Load("testdata/good/full.toml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	classes, _ := c.ClassTable()
	var names []string
	for _, cl := range classes {
		names = append(names, cl.Name)
	}
	if got := strings.Join(names, ","); got != "local,partners,*.insa-lyon.fr,*" {
		t.Errorf("classes %s", got)
	}
	if *classes[1].Anvil.ConnectionCount != 10 || classes[1].Refuse != 20 || classes[2].Refuse != 3 || classes[2].Queue != 8 {
		t.Errorf("class values %+v", classes[1:3])
	}
	if c.Log.Format != "json" || c.Limiter.MaxKeys != 500000 || c.Anvil.RateTimeUnit.D().Seconds() != 60 {
		t.Errorf("values %+v", c)
	}
	if m, _ := c.Anvil.Socket.FileMode(); m != 0o600 {
		t.Errorf("mode %o", m)
	}
}

func TestDefaults(t *testing.T) {
	c := Default()
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	classes, _ := c.ClassTable()
	if len(classes) != 1 || !classes[0].Masks[0].IsAny() {
		t.Errorf("default classes %+v", classes)
	}
	if !c.Anvil.Enabled || c.Path(c.Anvil.Listen[0][len("unix:"):]) != filepath.Join(DefaultRuntimeDir(), "anvil") {
		t.Errorf("default anvil %+v", c.Anvil)
	}
}

// TestSocketDir: relative socket paths live in runtime_dir; without it,
// in state_dir when only that is set (configurations written before
// runtime_dir keep their sockets where they were), else in the default
// runtime directory, which for a user without XDG_RUNTIME_DIR is the
// default state directory.
func TestSocketDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	t.Setenv("XDG_STATE_HOME", "/home/u/.local/state")
	defRuntime := "/run/user/1000/sluice"
	if os.Geteuid() == 0 {
		defRuntime = "/run/sluice"
	}
	cases := []struct {
		name, state, runtime, want string
	}{
		{"defaults", DefaultStateDir(), "", defRuntime},
		{"runtime_dir set", DefaultStateDir(), "/srv/sock", "/srv/sock"},
		{"state_dir set alone", "/srv/state", "", "/srv/state"},
		{"both set", "/srv/state", "/srv/sock", "/srv/sock"},
	}
	for _, tc := range cases {
		c := Default()
		c.StateDir, c.RuntimeDir = tc.state, tc.runtime
		if got := c.SocketDir(); got != tc.want {
			t.Errorf("%s: SocketDir() = %q, want %q", tc.name, got, tc.want)
		}
		if got := c.Path("throttle"); got != filepath.Join(tc.want, "throttle") {
			t.Errorf("%s: Path(throttle) = %q", tc.name, got)
		}
		if got := c.Path("/abs/x"); got != "/abs/x" {
			t.Errorf("%s: Path(/abs/x) = %q", tc.name, got)
		}
	}
	// Under systemd, the directories the unit made.
	t.Setenv("STATE_DIRECTORY", "/var/lib/sluice")
	t.Setenv("RUNTIME_DIRECTORY", "/run/sluice:/run/other")
	if got, want := Default().SocketDir(), "/run/sluice"; got != want || DefaultStateDir() != "/var/lib/sluice" {
		t.Errorf("under systemd: SocketDir() = %q, state %q; want %q, /var/lib/sluice", got, DefaultStateDir(), want)
	}
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("RUNTIME_DIRECTORY", "")
	if os.Geteuid() != 0 {
		t.Setenv("XDG_RUNTIME_DIR", "")
		if got := DefaultRuntimeDir(); got != DefaultStateDir() {
			t.Errorf("without XDG_RUNTIME_DIR: DefaultRuntimeDir() = %q, want the state dir %q", got, DefaultStateDir())
		}
	}
}

func TestBadFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.toml")
	for _, f := range files {
		_, errs := Load(f)
		var lines []string
		for _, e := range errs {
			lines = append(lines, strings.ReplaceAll(e.Error(), "testdata/bad/", ""))
		}
		got := strings.Join(lines, "\n") + "\n"
		wantFile := strings.TrimSuffix(f, ".toml") + ".err"
		if *update {
			if err := os.WriteFile(wantFile, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(wantFile)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got != string(want) {
			t.Errorf("%s errors:\n%s\nwant:\n%s", f, got, want)
		}
	}
}

func TestParseListen(t *testing.T) {
	cases := []struct{ in, net, addr, err string }{
		{"unix:/run/x", "unix", "/run/x", ""},
		{"inet:127.0.0.1:10040", "tcp", "127.0.0.1:10040", ""},
		{"inet:[::1]:10040", "tcp", "[::1]:10040", ""},
		{"inet:localhost:x", "", "", "invalid port"},
		{"/run/x", "", "", "want unix:PATH"},
		{"unix:" + strings.Repeat("a", 200), "", "", "longer than 104"},
	}
	for _, c := range cases {
		n, a, err := ParseListen(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || n != c.net || a != c.addr {
			t.Errorf("%q: %s %s %v", c.in, n, a, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/good/full.toml", "testdata/bad/values.toml", "testdata/bad/unknown-keys.toml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, errs := Parse(data, "fuzz.toml")
		if len(errs) == 0 {
			c.ClassesFile = "" // do not read files named by fuzz input
			_ = c.Validate()
		}
	})
}
