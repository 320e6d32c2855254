package muxd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// openOwnFile opens or creates a regular file with one link owned by root
// or the owner, and refuses, without following, waiting or writing,
// anything else at the path. (internal/cli's TestMuxRefusesUnsafePidFile
// runs the same cases through the binary as root with -U.)
func TestOpenOwnFile(t *testing.T) {
	dir := t.TempDir()
	me := fileOwner{uid: os.Geteuid(), name: "me"}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		plant  func(path string) error
		reason string // "" when the file must open
	}{
		{"missing", func(string) error { return nil }, ""},
		{"regular", func(p string) error { return os.WriteFile(p, []byte("123\n"), 0o600) }, ""},
		{"symlink", func(p string) error { return os.Symlink(target, p) }, "it is a symbolic link, which sluice never follows"},
		{"dangling symlink", func(p string) error { return os.Symlink(filepath.Join(dir, "nothing"), p) }, "it is a symbolic link, which sluice never follows"},
		{"FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "it is a FIFO, not a regular file"},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }, "it is a directory, not a regular file"},
		{"hard link", func(p string) error { return os.Link(target, p) }, "it has 2 hard links; sluice writes only a file with one"},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, struct {
			name   string
			plant  func(path string) error
			reason string
		}{"another user's", func(p string) error {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Chown(p, 65534, -1)
		}, "it is owned by uid 65534, neither root nor me"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "file")
			if err := c.plant(path); err != nil {
				t.Fatal(err)
			}
			f, err := openOwnFile(path, me)
			if c.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("opened %v (%v)", fi, err)
				}
				return
			}
			var rf *refusedFile
			if !errors.As(err, &rf) || err.Error() != c.reason {
				t.Errorf("got %v (%T), want the refusal %q", err, err, c.reason)
			}
			if f != nil {
				f.Close()
				t.Error("a file came back with the error")
			}
		})
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep\n" {
		t.Errorf("the link's target now holds %q (%v)", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nothing")); err == nil {
		t.Error("the dangling link's target was created")
	}
}

// Run refuses a pid file that is a symbolic link before anything else,
// whoever runs it: status 1, the reference's "Could not open PID file"
// with the reason, on stderr and in syslog at mail.err.
func TestRunRefusesLinkedPidFile(t *testing.T) {
	mask := syscall.Umask(0o022) // Run sets the umask
	defer syscall.Umask(mask)
	dir := t.TempDir()
	logSock := filepath.Join(dir, "log")
	logs, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: logSock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "mx.pid")
	if err := os.Symlink(target, pidFile); err != nil {
		t.Fatal(err)
	}
	o := Options{Prog: "px", Label: "mx-test", Facility: "mail", SyslogSocket: logSock, PidFile: pidFile, Foreground: true, Spool: dir}
	var stderr bytes.Buffer
	msg := "Could not open PID file " + pidFile + ": it is a symbolic link, which sluice never follows"
	if code := Run(context.Background(), o, &stderr); code != 1 || stderr.String() != "px: "+msg+"\n" {
		t.Errorf("got %d %q, want 1 %q", code, stderr.String(), "px: "+msg+"\n")
	}
	_ = logs.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard: Run sent it before it returned
	buf := make([]byte, 4096)
	n, err := logs.Read(buf)
	// mail (2) << 3 | err (3) = 19.
	if re := regexp.MustCompile(`^<19>\w{3} [ \d]\d \d\d:\d\d:\d\d mx-test\[\d+\]: ` + regexp.QuoteMeta(msg) + `$`); err != nil || !re.Match(buf[:n]) {
		t.Errorf("syslog %q (%v)", buf[:n], err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep\n" || fileModeOf(t, target) != 0o600 {
		t.Errorf("the link's target changed: %q (%v)", b, err)
	}
}

func fileModeOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
