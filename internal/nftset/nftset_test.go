package nftset

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/peercred/peercredtest"
	"sluice/internal/testutil/peer"
)

func TestRulesetText(t *testing.T) {
	got := Ruleset{Table: "sluice", Ports: []int{25, 587}, Size: 100}.Text()
	want := `add table inet sluice
delete table inet sluice
table inet sluice {
	set flood4 { type ipv4_addr; flags timeout; size 100; }
	set flood6 { type ipv6_addr; flags timeout; size 100; }
	chain input {
		type filter hook input priority filter - 10; policy accept;
		tcp dport { 25, 587 } ip saddr @flood4 drop
		tcp dport { 25, 587 } ip6 saddr @flood6 drop
	}
}
`
	if got != want {
		t.Fatalf("Text:\n%s\nwant:\n%s", got, want)
	}
}

// testNft returns an Nft on a table of the test's own (a host running
// sluice keeps its "sluice" table), removed when the test ends.
func testNft(t *testing.T) *Nft {
	t.Helper()
	peer.Root(t, "nft changes the ruleset")
	path := peer.Binary(t, "nftables", "/usr/sbin/nft")
	n := &Nft{Path: path, Table: fmt.Sprintf("sluicetest%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	t.Cleanup(func() { n.Remove(context.Background()) })
	return n
}

// listen returns a TCP listener on 127.0.0.1 that accepts and closes.
func listen(t *testing.T) (net.Listener, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l, l.Addr().(*net.TCPAddr).Port
}

// dialFrom connects from the loopback address from to port, waiting at
// most wait: a dropped SYN gets no answer.
func dialFrom(from string, port int, wait time.Duration) error {
	d := net.Dialer{Timeout: wait, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err == nil {
		c.Close()
	}
	return err
}

// TestNftDropsAtTheKernel: an address added to the set gets no answer
// from the port (its SYN is dropped), another address does, a port not
// in the rule does; removing the table ends the drop.
func TestNftDropsAtTheKernel(t *testing.T) {
	n := testNft(t)
	_, port := listen(t)
	_, other := listen(t)
	ctx := t.Context()
	if err := n.Install(ctx, Ruleset{Ports: []int{port}, Size: 16}); err != nil {
		t.Fatal(err)
	}
	if err := n.Add(ctx, netip.MustParseAddr("127.0.77.7"), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom("127.0.77.7", port, 1500*time.Millisecond); err == nil {
		t.Fatal("127.0.77.7 connected; want its SYN dropped")
	}
	if err := dialFrom("127.0.77.8", port, 5*time.Second); err != nil {
		t.Fatalf("127.0.77.8: %v, want it served", err)
	}
	if err := dialFrom("127.0.77.7", other, 5*time.Second); err != nil {
		t.Fatalf("127.0.77.7 to a port outside the rule: %v", err)
	}
	out := listSet(t, n, "flood4")
	if !strings.Contains(out, "127.0.77.7 timeout 30s") {
		t.Fatalf("set flood4:\n%s\nwant 127.0.77.7 with a 30s timeout", out)
	}
	// Installing again (a helper restarted) starts empty.
	if err := n.Install(ctx, Ruleset{Ports: []int{port}, Size: 16}); err != nil {
		t.Fatal(err)
	}
	if out := listSet(t, n, "flood4"); strings.Contains(out, "127.0.77.7") {
		t.Fatalf("set flood4 after a new install:\n%s", out)
	}
	n.Add(ctx, netip.MustParseAddr("127.0.77.7"), 30*time.Second)
	if err := n.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom("127.0.77.7", port, 5*time.Second); err != nil {
		t.Fatalf("127.0.77.7 after the table was removed: %v", err)
	}
}

// TestNftSetFull: an add past the set's size fails with nft's error.
func TestNftSetFull(t *testing.T) {
	n := testNft(t)
	ctx := t.Context()
	if err := n.Install(ctx, Ruleset{Ports: []int{25}, Size: 2}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := n.Add(ctx, netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Add(ctx, netip.MustParseAddr("192.0.2.3"), time.Minute); err == nil {
		t.Fatal("a third address in a set of 2 was added")
	}
	if err := n.Add(ctx, netip.MustParseAddr("2001:db8::3"), time.Minute); err != nil {
		t.Fatalf("IPv6 goes to its own set: %v", err)
	}
}

func listSet(t *testing.T, n *Nft, set string) string {
	t.Helper()
	out, err := exec.Command(n.Path, "list", "set", "inet", n.Table, set).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list set: %v: %s", err, out)
	}
	return string(out)
}

// TestServer: the helper's socket serves only its user: a connection
// of another (nobody) is closed unread; its user gets "error" for a
// malformed line and keeps the connection, "ok" for a request, whose
// duration is capped at MaxFor; a line past MaxLine ends the connection.
func TestServer(t *testing.T) {
	n := testNft(t)
	if err := n.Install(t.Context(), Ruleset{Ports: []int{25}, Size: 16}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "nftset")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // nobody may reach the socket: the server, not the file mode, refuses it
	sock := filepath.Join(dir, "escalate.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o666)
	srv := NewServer(n, Options{UID: os.Geteuid(), MaxFor: time.Minute})
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	h := peercredtest.Hold(t, "nobody", "unix", sock, 1)
	h.WaitClosed(t, 1)

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(line string) string {
		t.Helper()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		a, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return a
	}
	if a := ask("flush ruleset\n"); !strings.HasPrefix(a, "error not a request") {
		t.Fatalf("answer %q to a malformed line", a)
	}
	if a := ask("add 198.51.100.9 3600\n"); a != "ok\n" {
		t.Fatalf("answer %q to a request", a)
	}
	if out := listSet(t, n, "flood4"); !strings.Contains(out, "198.51.100.9 timeout 1m") {
		t.Fatalf("set flood4:\n%s\nwant 198.51.100.9 capped at 1m", out)
	}
	if a := ask("add 198.51.100.10 " + strings.Repeat("9", 200) + "\n"); !strings.HasPrefix(a, "error not a request") {
		t.Fatalf("answer %q to a long line", a)
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the connection stayed open after a line past MaxLine")
	}
}
