package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/muxref"
)

// holdCompile is a BEGIN block put before the test filter: while the
// spool holds "hold", compiling the filter writes "compiling" there and
// waits until "gate" exists (%[1]s is the spool).
const holdCompile = `BEGIN {
    if (-e '%[1]s/hold') {
        open(my $f, '>', '%[1]s/compiling') or die "compiling: $!";
        close $f;
        select(undef, undef, undef, 0.01) until -e '%[1]s/gate';
    }
}
`

// TestMuxEmbedRereadCompileDoesNotHoldTheOwner: with -E and the real
// mimedefang.pl, a reread makes a new perl compile the filter while the
// multiplexor serves: the real md-mx-ctrl's status and load are answered
// while the compile is held, and a request for a worker is served by a
// worker of the new generation once it is done.
func TestMuxEmbedRereadCompileDoesNotHoldTheOwner(t *testing.T) {
	needReal(t, perlWorker)
	needReferenceCtl(t)
	bin, _ := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	filter, _ := writeFilter(t, spool)
	body, err := os.ReadFile(filter)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filter, append([]byte(fmt.Sprintf(holdCompile, spool)), body...), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(spool, "mx.sock")
	args := append([]string{"mux", "-D", "-z", spool, "-s", sock, "-F", filter, "-E", "-m", "1", "-x", "2"}, uarg...)
	startMuxProc(t, "sluice", append([]string{bin}, args...), spool, sock)
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(spool, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Runs before the multiplexor is stopped: no compile outlives the
	// test.
	t.Cleanup(func() { touch("gate") })
	ping := "relayok 10.1.2.3 mx.example 2525 127.0.0.1 25 Q1\n"
	const pong = "ok 1 relay%2010.1.2.3/mx.example%20ok 250 2.1.0 0\n"
	if got := muxQuery(t, sock, ping); got != pong {
		t.Fatalf("before the reread: %q, want %q", got, pong)
	}

	touch("hold")
	ctl := func(args ...string) (string, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := muxref.CommandContext(ctx, t, append([]string{referenceCtl, "-s", sock}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		took := time.Since(t0)
		if ctx.Err() != nil {
			t.Fatalf("md-mx-ctrl %s: no answer in 10 s while the filter compiles", strings.Join(args, " "))
		}
		if err != nil {
			t.Fatalf("md-mx-ctrl %s: %v: %s", strings.Join(args, " "), err, out.String())
		}
		return out.String(), took
	}
	ctl("reread")
	// A request for a worker: none is free until the new perl has
	// compiled the filter.
	relay := make(chan string, 1)
	go func() {
		c, err := net.Dial("unix", sock)
		if err != nil {
			relay <- err.Error()
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		_, _ = c.Write([]byte(ping))
		b := make([]byte, 512)
		n, _ := c.Read(b)
		relay <- string(b[:n])
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(spool, "compiling")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the filter was not compiled again after the reread")
		}
	}
	status, took := ctl("status")
	t.Logf("md-mx-ctrl status answered in %v while the filter compiles: %q", took, status)
	if !strings.Contains(status, "Worker 1: ") {
		t.Errorf("status %q, want a line per worker", status)
	}
	if got, _ := ctl("load"); !strings.Contains(got, "Msgs/Sec") {
		t.Errorf("load while the filter compiles: %q, want the statistics", got)
	}
	select {
	case got := <-relay:
		t.Fatalf("the request for a worker was answered %q before the compile ended", got)
	default:
	}
	touch("gate")
	select {
	case got := <-relay:
		if got != pong {
			t.Errorf("after the compile: %q, want %q", got, pong)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the request for a worker was not served after the compile")
	}
}
