package privdrop

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/testutil/peer"
)

// childEnv makes the test binary act as the child of TestDropInChild.
const childEnv = "SLUICE_PRIVDROP_CHILD"

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(child(name))
	}
	os.Exit(m.Run())
}

// child drops to name and reports what it can still do, one fact a line.
func child(name string) int {
	a, err := Lookup(name)
	if err != nil {
		fmt.Println("lookup:", err)
		return 1
	}
	if err := a.Drop(); err != nil {
		fmt.Println("drop:", err)
		return 1
	}
	fmt.Printf("ids %d %d %d %d\n", os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid())
	groups, _ := os.Getgroups()
	fmt.Printf("groups %v\n", groups)
	if _, err := os.ReadFile("/etc/shadow"); err != nil {
		fmt.Println("shadow: denied")
	} else {
		fmt.Println("shadow: READ")
	}
	if err := syscall.Setuid(0); err != nil {
		fmt.Println("setuid0: denied")
	} else {
		fmt.Println("setuid0: ALLOWED")
	}
	return 0
}

// TestDropInChild: a root process that drops to nobody runs as nobody's
// user and group with only nobody's groups, can no longer read a file only
// root reads, and cannot become root again.
func TestDropInChild(t *testing.T) {
	peer.Root(t, "dropping privileges needs root")
	nobody := peer.User(t, "nobody")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=nobody")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	a, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("ids %s %s %d %d", nobody.Uid, nobody.Uid, a.GID, a.GID),
		fmt.Sprintf("groups %v", a.Groups),
		"shadow: denied",
		"setuid0: denied",
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after the drop:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := Lookup("no-such-user-sluice-test")
	if !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("Lookup(unknown) = %v, want ErrUnknownUser", err)
	}
}

// TestDropAsSelf: dropping to the account the process already runs as is
// a no-op, and needs no privilege.
func TestDropAsSelf(t *testing.T) {
	a := Account{Name: "self", UID: os.Getuid(), GID: os.Getgid()}
	if !a.Current() {
		t.Fatalf("real and effective ids differ: %d/%d %d/%d", os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid())
	}
	if err := a.Drop(); err != nil {
		t.Fatalf("Drop to self: %v", err)
	}
}
