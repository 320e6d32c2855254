package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
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
		{"inet:8891", "", "", `"inet:8891": the host is missing: write inet:127.0.0.1:8891 (loopback) or inet:0.0.0.0:8891 (every address)`},
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

// strictDecode is the decoding Parse replaced: go-toml, strict, on top of
// the defaults, stopping at the first error.
func strictDecode(data []byte) (*Config, error) {
	c := Default()
	err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(c)
	return c, err
}

// sameAsStrict fails when Parse accepted data without an error but
// go-toml's strict decoder rejects it or decodes something else: the
// reflection walk must agree with the library wherever it accepts.
func sameAsStrict(t *testing.T, data []byte) {
	t.Helper()
	c, errs := Parse(data, "x.toml")
	if c == nil || len(errs) > 0 {
		return
	}
	want, err := strictDecode(data)
	if err != nil {
		t.Fatalf("Parse accepted what go-toml rejects (%v):\n%s", err, data)
	}
	c.File, c.lines, c.from, c.Included = "", nil, nil, nil
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Parse decoded\n%+v\ngo-toml decoded\n%+v\nfrom\n%s", c, want, data)
	}
}

// TestParseAgreesWithStrictDecoding runs sameAsStrict on every good file
// and a few corner cases (empty arrays, optional values, nested tables).
func TestParseAgreesWithStrictDecoding(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.toml")
	ex, _ := filepath.Glob("../../examples/*.toml")
	for _, f := range append(files, ex...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(f), func(t *testing.T) { sameAsStrict(t, b) })
	}
	for _, doc := range []string{
		"[anvil]\nlisten = []\n",
		"[anvil]\nlisten = [\"unix:a\", \"unix:b\"]\n[anvil.smtpd]\nclient_auth_rate_limit = 3\n",
		"[[throttle.policy]]\nname = \"a\"\nmatch = [\"*\"]\nlimit = \"1/1s\"\nmargin = \"1s\"\n",
		"[[class]]\nname = \"a\"\nmatch = [\"*\"]\n[class.anvil]\nclient_connection_count_limit = 0\n",
		"log = { level = \"debug\" }\n",
	} {
		sameAsStrict(t, []byte(doc))
	}
}

// TestOneErrorPerMistake: the first-hour file has eight mistakes of eight
// kinds; each is reported once, with its line.
func TestOneErrorPerMistake(t *testing.T) {
	_, errs := Load("testdata/bad/first-hour.toml")
	if len(errs) != 8 {
		t.Fatalf("%d errors, want 8: %v", len(errs), errs)
	}
	for _, e := range errs {
		if !regexp.MustCompile(`^testdata/bad/first-hour.toml:\d+: `).MatchString(e.Error()) {
			t.Errorf("no line: %v", e)
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"level", "format", "output", "facility", "tag", "syslog_socket"}
	for key, want := range map[string]string{
		"levle": "level", "lvel": "level", "Level": "level", "fromat": "format", "tags": "tag",
		"syslog_sockt": "syslog_socket", "colour": "", "x": "", "outputs_all": "",
	} {
		if got := nearest(key, names); got != want {
			t.Errorf("nearest(%q) = %q, want %q", key, got, want)
		}
	}
}

// FuzzParse: Parse never panics, and whatever it accepts go-toml's strict
// decoder accepts and decodes the same way.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/good/full.toml", "testdata/bad/values.toml", "testdata/bad/unknown-keys.toml", "testdata/bad/types.toml", "testdata/bad/first-hour.toml", "testdata/bad/redis-unix.toml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("[[class]]\nname = \"a\"\nmatch = [\"*\"]\n\n#---\n[[class]]\nname = \"b\"\nmatch = [\"10.0.0.0/8\"]\n[[class]]\nname = \"a\"\nrefuse = 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// An included file: the part after a "#---" line is merged into
		// the part before it (ParseSources), as include_dir's files are.
		if main, frag, ok := bytes.Cut(data, []byte("\n#---\n")); ok {
			if c, errs := ParseSources([]Source{{"main.toml", main}, {"conf.d/a.toml", frag}}); c != nil {
				c.ClassesFile, c.User = "", ""
				_ = c.Validate()
			} else if len(errs) == 0 {
				t.Fatal("no config and no error")
			}
		}
		sameAsStrict(t, data)
		c, errs := Parse(data, "fuzz.toml")
		if c != nil {
			c.ClassesFile = "" // do not read files named by fuzz input
			c.User = ""        // nor look users up
			_ = c.Validate()
		} else if len(errs) == 0 {
			t.Fatal("no config and no error")
		}
	})
}
