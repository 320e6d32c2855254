package sdlisten

import (
	"os"
	"strings"
	"testing"
)

// TestParseServiceUnit reads the project's own sluice.service.
func TestParseServiceUnit(t *testing.T) {
	b, err := os.ReadFile("../../examples/systemd/sluice.service")
	if err != nil {
		t.Fatal(err)
	}
	u, err := ParseServiceUnit(b)
	if err != nil {
		t.Fatal(err)
	}
	if u.User != "sluice" || u.ProtectSystem != "strict" {
		t.Fatalf("%+v", u)
	}
	for dir, want := range map[string]bool{
		"/run/sluice": true, "/run/sluice/x": true, "/var/lib/sluice": true,
		"/var/spool/postfix/sluice": false, "/etc/sluice": false, "/run": false, "/tmp/x": true,
	} {
		if got := u.CanWrite(dir); got != want {
			t.Errorf("CanWrite(%s) = %v, want %v", dir, got, want)
		}
	}
	u, err = ParseServiceUnit([]byte("[Service]\nProtectSystem=full\nReadWritePaths=-/etc/sluice /var/spool/postfix/sluice\nReadOnlyPaths=/var/spool/postfix/sluice/ro\nReadWritePaths=\n"))
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{"/etc/x": false, "/var/spool/postfix/sluice": true, "/var/spool/postfix/sluice/ro": false, "/usr/lib": false} {
		if got := u.CanWrite(dir); got != want {
			t.Errorf("full: CanWrite(%s) = %v, want %v", dir, got, want)
		}
	}
}

func TestParseServiceUnitErrors(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{"[Service]\nUser\n", `line 2: "User" is not KEY=VALUE`},
		{"[Service]\nProtectSystem=maybe\n", "line 2: ProtectSystem=maybe is none of"},
		{"[Service]\nReadWritePaths=var/spool\n", `line 2: ReadWritePaths=var/spool: "var/spool" is not an absolute path`},
		{"[Service]\nUser=a\x00b\n", "line 2: User= holds a NUL byte"},
		{"[Service]\nReadWritePaths=" + strings.Repeat("/a ", 1100) + "\n", "more than 1024 paths"},
		{"[Service]\nUser=" + strings.Repeat("x", 5000) + "\n", "token too long"},
	} {
		if _, err := ParseServiceUnit([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%.40q: %v, want %q", c.in, err, c.err)
		}
	}
}
