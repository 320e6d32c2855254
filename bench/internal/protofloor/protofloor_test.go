package protofloor

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/bench/internal/daemons"
	"sluice/internal/testutil/peer"
	"sluice/internal/throttle"
)

// build compiles bench/protofloor.c as the scripts do, with warnings as
// errors.
func build(t *testing.T) string {
	t.Helper()
	cc := peer.Binary(t, "gcc", "cc")
	bin := filepath.Join(t.TempDir(), "protofloor")
	out, err := exec.Command(cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, "../../protofloor.c").CombinedOutput()
	if err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return bin
}

// start runs the floor in mode on addr once it listens. stop sends it
// SIGTERM and fails the test unless it exits with status 0; it runs at
// the end of the test too.
func start(t *testing.T, bin, mode, addr string) (stop func()) {
	t.Helper()
	cmd := exec.Command(bin, mode, addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("protofloor %s after SIGTERM: %v", mode, err)
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Errorf("protofloor %s ignored SIGTERM", mode)
			}
		})
	}
	t.Cleanup(stop)
	network, a := "tcp", addr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, a = "unix", p
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial(network, a)
		if err == nil {
			c.Close()
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("protofloor %s did not listen on %s: %v", mode, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exchange writes each of parts in its own write, then reads until it has
// read len(want) bytes, and compares.
func exchange(t *testing.T, c net.Conn, r *bufio.Reader, want string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if _, err := io.WriteString(c, p); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // separate reads on the server, so a request straddles them
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("reading %q: %v (got %q)", want, err, got)
	}
	if string(got) != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
}

// TestAnvil: the announcement on accept, each request's static reply by
// its first line, several requests in one write answered in order, one
// request split over writes answered once, and the socket removed at
// SIGTERM.
func TestAnvil(t *testing.T) {
	bin := build(t)
	sock := filepath.Join(t.TempDir(), "anvil")
	stop := start(t, bin, "anvil", "unix:"+sock)
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	exchange(t, c, r, "protocol=anvil_protocol\n\n")
	for _, tc := range []struct{ req, reply string }{
		{"connect", "status=0\ncount=1\nrate=1\n\n"},
		{"message", "status=0\nrate=1\n\n"},
		{"recipient", "status=0\nrate=1\n\n"},
		{"newtls_status", "status=0\nrate=1\n\n"},
		{"lookup", "status=0\ncount=1\nrate=1\nmail=1\nrcpt=1\nnewtls=1\nauth=1\n\n"},
		{"disconnect", "status=0\n\n"},
		{"connection", "status=-1\n\n"}, // a name that only starts like one
		{"bogus", "status=-1\n\n"},
	} {
		exchange(t, c, r, tc.reply, "request="+tc.req+"\nident=smtp:10.0.0.1\n\n")
	}
	exchange(t, c, r, "status=0\ncount=1\nrate=1\n\nstatus=0\n\n",
		"request=connect\nident=smtp:10.0.0.2\n\nrequest=disconnect\nident=smtp:10.0.0.2\n\n")
	exchange(t, c, r, "status=0\nrate=1\n\n", "request=mess", "age\nident=smtp:10.0.0.3\n", "\n")
	c.Close()
	stop()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after SIGTERM: %v", err)
	}
}

// TestPolicy: a request ends at the empty line, wherever the writes cut
// it, and each is answered action=DUNNO.
func TestPolicy(t *testing.T) {
	bin := build(t)
	port, err := daemons.FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	start(t, bin, "policy", addr)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	req := "request=smtpd_access_policy\nprotocol_state=RCPT\nsender=a@example.org\n\n"
	exchange(t, c, r, "action=DUNNO\n\n", req)
	exchange(t, c, r, "action=DUNNO\n\naction=DUNNO\n\n", req+req)
	exchange(t, c, r, "action=DUNNO\n\n", req[:10], req[10:len(req)-1], "\n")
}

// TestThrottle: the sluice client's ACQUIRE gets an OK for now, and DONE
// ends the exchange.
func TestThrottle(t *testing.T) {
	bin := build(t)
	sock := filepath.Join(t.TempDir(), "throttle")
	start(t, bin, "throttle", "unix:"+sock)
	for range 3 {
		before := time.Now()
		cl, err := throttle.Dial("unix", sock, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := cl.Acquire("relay.example")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Defer != "" || rep.At.Before(before.Add(-time.Second)) || rep.At.After(time.Now().Add(time.Second)) {
			t.Errorf("reply %+v, want OK at about now", rep)
		}
		if err := cl.Done(); err != nil {
			t.Errorf("DONE: %v", err)
		}
	}
}
