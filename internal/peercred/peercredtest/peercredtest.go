// Package peercredtest gives the tests of peer identity a second local
// user: Hold starts a child process running as another account (nobody)
// that opens connections to an address and holds them, reporting each
// one the server closes. The child is the test binary itself, copied
// where that account may run it: this package's init turns a process
// started with its environment variable into the child before any test
// runs, so a test package needs nothing but the import.
package peercredtest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
)

// envChild carries the child's orders: "NETWORK ADDRESS COUNT".
const envChild = "SLUICE_PEERCREDTEST_CHILD"

func init() {
	if spec := os.Getenv(envChild); spec != "" {
		os.Exit(child(spec, os.Stdin, os.Stdout))
	}
}

// child dials, reports "dialed" once every connection is open, then
// "closed I" for each connection the server ends, and holds the rest
// until its stdin closes.
func child(spec string, stdin io.Reader, stdout io.Writer) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(stdout, "error bad orders %q\n", spec)
		return 2
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		fmt.Fprintf(stdout, "error bad count %q\n", f[2])
		return 2
	}
	lines := make(chan string, n+1)
	var conns []net.Conn
	for i := range n {
		c, err := net.Dial(f[0], f[1])
		if err != nil {
			fmt.Fprintf(stdout, "error dial %d: %v\n", i, err)
			return 1
		}
		conns = append(conns, c)
		go func() {
			io.Copy(io.Discard, c) // until the server closes it
			lines <- fmt.Sprintf("closed %d", i)
		}()
	}
	fmt.Fprintln(stdout, "dialed")
	go func() {
		for l := range lines {
			fmt.Fprintln(stdout, l)
		}
	}()
	io.Copy(io.Discard, stdin)
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// Holder is a child process, running as another user, that holds
// connections open.
type Holder struct {
	// UID is the user the child runs as.
	UID   int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	// Closed counts the connections the server has closed so far, as
	// seen by WaitClosed.
	Closed int
}

// Hold starts a child running as username that opens n connections to
// addr on network ("tcp", "unix") one after the other, and returns once
// all are open (a connection the server refuses is still opened first:
// the kernel completes it before the server accepts it). It needs root
// (peer.Root) and the user (peer.User). The child ends when the test
// does.
func Hold(t testing.TB, username, network, addr string, n int) *Holder {
	t.Helper()
	peer.Root(t, "a child process runs as "+username)
	u := peer.User(t, username)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	exe := copyExecutable(t)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", envChild, network, addr, n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a child as %s: %v", username, err)
	}
	h := &Holder{UID: uid, cmd: cmd, stdin: stdin, lines: make(chan string, n+2)}
	t.Cleanup(h.Release)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	if l := h.next(t); l != "dialed" {
		t.Fatalf("child as %s: %q, want dialed", username, l)
	}
	return h
}

// next returns the child's next line, failing t if none comes within 30 s
// (a bound against a hang, not a timing requirement) or the child ended.
func (h *Holder) next(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatal("the child ended early")
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no word from the child in 30s")
	}
	return ""
}

// WaitClosed waits until the server has closed k connections in all
// (Closed reaches k).
func (h *Holder) WaitClosed(t testing.TB, k int) {
	t.Helper()
	for h.Closed < k {
		l := h.next(t)
		if !strings.HasPrefix(l, "closed ") {
			t.Fatalf("child: %q", l)
		}
		h.Closed++
	}
}

// Release closes the child's connections and waits for it to end.
func (h *Holder) Release() {
	if h.stdin == nil {
		return
	}
	h.stdin.Close()
	h.stdin = nil
	h.cmd.Wait()
}

// copyExecutable copies the running test binary into a directory every
// user may enter (the build's own directory is private to its owner).
func copyExecutable(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "peercredtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, filepath.Base(self))
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// HostAddr is an IPv4 address of this host that is not loopback (the
// zero Addr if it has none): a peer address that has no local uid.
func HostAddr() netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && !ip.IsLoopback() {
				return ip.Unmap()
			}
		}
	}
	return netip.Addr{}
}
