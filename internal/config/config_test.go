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
	if !c.Anvil.Enabled || c.Path(c.Anvil.Listen[0][len("unix:"):]) != filepath.Join(c.StateDir, "anvil") {
		t.Errorf("default anvil %+v", c.Anvil)
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
