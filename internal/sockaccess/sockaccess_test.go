package sockaccess

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/privdrop"
	"sluice/internal/testutil/peer"
)

const childEnv = "SLUICE_SOCKACCESS_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(child(path))
	}
	os.Exit(m.Run())
}

// child drops to nobody, connects to path and prints the explained error.
func child(path string) int {
	a, err := privdrop.Lookup("nobody")
	if err == nil {
		err = a.Drop()
	}
	if err != nil {
		fmt.Println("drop:", err)
		return 1
	}
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
		fmt.Println("connected")
		return 0
	}
	err = Explain(path, err, "[throttle.socket] group and mode")
	var e *Error
	fmt.Println(errors.Is(err, fs.ErrPermission), errors.As(err, &e), err)
	return 0
}

// TestExplainAsNobody: a client running as nobody, refused by a directory
// it cannot search or by the socket's own mode, is told which one, with
// its owner and mode, and the fix; a socket it may use connects.
func TestExplainAsNobody(t *testing.T) {
	peer.Root(t, "refusing a client needs another user than root")
	peer.User(t, "nobody")
	base, err := os.MkdirTemp("", "sluice-sockaccess")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	mk := func(dir string, dirMode, sockMode os.FileMode) string {
		d := filepath.Join(base, dir)
		if err := os.Mkdir(d, dirMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, dirMode); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, "throttle")
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		if err := os.Chmod(p, sockMode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path, want string
	}{
		{"closed directory", mk("state", 0o750, 0o666),
			"true true dial unix " + filepath.Join(base, "state", "throttle") + ": connect: permission denied: user nobody (uid 65534, groups [nogroup]) cannot pass through the directory " + filepath.Join(base, "state") + " (owner root, group root, mode 0750) to reach the socket"},
		{"socket mode", mk("run", 0o755, 0o660),
			"true true dial unix " + filepath.Join(base, "run", "throttle") + ": connect: permission denied: user nobody (uid 65534, groups [nogroup]) may not write to the socket " + filepath.Join(base, "run", "throttle") + " (owner root, group root, mode 0660): set its group to one of this user's groups and its mode to 0660 ([throttle.socket] group and mode)"},
		{"allowed", mk("open", 0o755, 0o666), "connected"},
	}
	for _, tc := range cases {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+tc.path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: child: %v\n%s", tc.name, err, out)
		}
		if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s:\n got %s\nwant %s...", tc.name, got, tc.want)
		}
	}
}

func TestExplainOtherErrors(t *testing.T) {
	err := errors.New("connection refused")
	if got := Explain("/x", err, ""); got != err {
		t.Errorf("Explain changed a non-permission error: %v", got)
	}
	if Explain("/x", nil, "") != nil {
		t.Error("Explain(nil) is not nil")
	}
}
