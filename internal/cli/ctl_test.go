package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/muxctl"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/muxref"
)

// referenceCtl is md-mx-ctrl by its installed name (argv[0]); muxref runs
// the real one from wherever it is (not sluice's drop-in).
const referenceCtl = muxref.CtlPath

// needReferenceCtl ends the test unless the real md-mx-ctrl is there
// (muxref.Ctl).
func needReferenceCtl(t *testing.T) {
	t.Helper()
	muxref.Ctl(t)
}

type ctlResult struct {
	out, err string
	code     int
}

func (r ctlResult) String() string {
	return fmt.Sprintf("status %d\nstdout %q\nstderr %q", r.code, clip(r.out), clip(r.err))
}

// clip shortens long texts in failure messages.
func clip(s string) string {
	if len(s) <= 300 {
		return s
	}
	return fmt.Sprintf("%s...(%d bytes)...%s", s[:150], len(s), s[len(s)-150:])
}

// refCtl runs the real md-mx-ctrl (bounded, since it has no timeouts).
func refCtl(t *testing.T, posix bool, stdin string, args ...string) ctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := muxref.CommandContext(ctx, t, append([]string{referenceCtl}, args...)...)
	cmd.Env = os.Environ()
	if posix {
		cmd.Env = append(cmd.Env, "POSIXLY_CORRECT=1")
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %q hangs", referenceCtl, args)
	}
	return ctlResult{out.String(), errs.String(), exitCode(t, err)}
}

// ourCtl runs sluice ctl in-process, named as the reference is so that
// getopt's messages and the usage line compare byte for byte.
func ourCtl(posix bool, stdin string, args ...string) ctlResult {
	var out, errs bytes.Buffer
	s := ctlSetup{prog: referenceCtl, name: ctlReferenceName, stdin: strings.NewReader(stdin), posix: posix}
	code := runCtl(context.Background(), s, args, &out, &errs)
	return ctlResult{out.String(), errs.String(), code}
}

// sameAsReference runs both with the same arguments and stdin and wants
// identical stdout, stderr and status. Against a live multiplexor some
// numbers move with the clock (uptime, ago=, Age, the 10-second load
// window), so a mismatch is retried a few times rather than masked: the
// two runs must agree exactly at least once.
func sameAsReference(t *testing.T, posix bool, stdin string, args ...string) {
	t.Helper()
	var ref, ours ctlResult
	for try := 0; try < 5; try++ {
		if try > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		ref = refCtl(t, posix, stdin, args...)
		ours = ourCtl(posix, stdin, args...)
		if ref == ours {
			return
		}
	}
	t.Errorf("md-mx-ctrl %s (stdin %q):\nsluice ctl: %v\nreference:  %v", clip(fmt.Sprintf("%q", args)), clip(stdin), ours, ref)
}

// The command table and the name: `sluice ctl` without a command shows
// its usage and fails as md-mx-ctrl does.
func TestCtlCommandTable(t *testing.T) {
	var out, errs bytes.Buffer
	code := Main(context.Background(), []string{"ctl", "-s", filepath.Join(t.TempDir(), "none")}, &out, &errs)
	want := "Usage: sluice ctl [options] command\n\nOptions:\n" +
		"-h              -- Display help\n" +
		"-s path         -- Specify path to multiplexor socket\n" +
		"-i              -- Read commands from stdin\n" +
		"ERROR MXCommand: connect: No such file or directory: Is multiplexor running?\n"
	if code != 1 || out.String() != "" || errs.String() != want {
		t.Errorf("status %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
	out.Reset()
	Main(context.Background(), []string{"help"}, &out, &errs)
	if !strings.Contains(out.String(), "\n  ctl      md-mx-ctrl: ") {
		t.Errorf("ctl is not in the command list:\n%s", out.String())
	}
	if got := Invoked("/usr/bin/" + ctlReferenceName); got != "ctl" {
		t.Errorf("Invoked(%q) = %q, want ctl", "/usr/bin/"+ctlReferenceName, got)
	}
}

// Flags, usage and connection errors of command lines without -s, which
// reach for the default socket (muxctl.DefaultSocket, compiled into both),
// side by side with the reference: in a private mount namespace whose
// spool is empty, whatever the host runs there (inPrivateMounts).
func TestCtlDefaultSocketVsReference(t *testing.T) {
	needReferenceCtl(t)
	if !inPrivateMounts(t, filepath.Dir(muxctl.DefaultSocket)) {
		return
	}
	for _, args := range [][]string{
		{}, {"-h"}, {"-x"}, {"-s"}, {"--foo"}, {"-is"}, {"-ih"}, {"-i", "-h"}, {"-i", "foo", "-x"},
	} {
		sameAsReference(t, false, "", args...)
	}
}

// Flags, usage and connection errors with no multiplexor, side by side
// with the reference.
func TestCtlFlagsVsReference(t *testing.T) {
	needReferenceCtl(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.sock")
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, strings.Repeat("d", 120))
	for _, args := range [][]string{
		{"-s", missing, "status"}, {"status", "-s", missing}, {"-s" + missing, "-x"},
		{"-s", missing, "-h"}, {"-s", missing}, {"-s", missing, "-i"},
		{"-s", missing, "--", "-s"}, {"-s", missing, "-"},
		{"-s", "", "status"}, {"-s", file, "status"}, {"-s", dir, "load1", "60"},
		{"-s", long, "msgs"}, {"-s", "@abstract", "msgs"}, {"-s", missing, "-é"},
	} {
		sameAsReference(t, false, "", args...)
	}
	sameAsReference(t, false, "status\nload\n", "-s", missing, "-i")
	// POSIXLY_CORRECT: options end at the first operand.
	sameAsReference(t, true, "", "-s", missing, "status", "-x")
}

// ctlServer listens on a fresh socket and answers each connection with
// handle.
func ctlServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "mx.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return sock
}

// readRequest reads a request as the multiplexor does: up to a newline.
// md-mx-ctrl sends no newline on a line it had to cut, nor for the last
// line of -i input without one; so a pause of quiet ends the request too
// (waiting longer only slows the test).
func readRequest(c net.Conn) []byte {
	var b []byte
	buf := make([]byte, 65536)
	for !bytes.HasSuffix(b, []byte("\n")) {
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := c.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	return b
}

// Replies no multiplexor sends, from a fake server, side by side with the
// reference: odd status and load numbers, short, empty, overlong and
// NUL-bearing replies, a server that resets the connection; and the exact
// request bytes md-mx-ctrl builds from its arguments and from -i input.
func TestCtlFakeServerVsReference(t *testing.T) {
	needReferenceCtl(t)
	var mu sync.Mutex
	reply := ""
	canned := ctlServer(t, func(c net.Conn) {
		readRequest(c)
		mu.Lock()
		r := reply
		mu.Unlock()
		_, _ = io.WriteString(c, r)
	})
	letters := strings.Repeat("B", 30) + strings.Repeat("I", 40) + strings.Repeat("KS", 15)
	for _, c := range []struct {
		reply string
		cmds  [][]string
	}{
		{"IBKSX 5 1 0 0 9\n", [][]string{{"status"}, {"barstatus"}, {"rawstatus"}, {"anything"}}},
		{letters + " 123 4 30 7 9\n", [][]string{{"status"}, {"barstatus"}}},
		{letters + " 123 4 15 15 9\n", [][]string{{"barstatus"}}},
		{"BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBI 1 1 1000 999 1\n", [][]string{{"barstatus"}}},
		{"error: Unknown command\n", [][]string{{"status"}, {"barstatus"}, {"load1", "60"}, {"foo"}}},
		{"S", [][]string{{"status"}}},
		{"1 2 3 4 1.005 2.5 inf nan 0.125 0.375 1e3 -0 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19\n",
			[][]string{{"load"}, {"load-relayok"}, {"load-senderok"}, {"load-recipok"}, {"rawload"}}},
		{"7 2 3 4 1.5 2.25 3.125 4.0625 10.05 20.5 30 99999.999 3600 0 7 -1\n",
			[][]string{{"hload"}, {"hload-relayok"}, {"hload-senderok"}, {"hload-recipok"}, {"rawhload-recipok"}}},
		{"3 1.25 2.5 4 1 2 5 3 3 6 4.5 4 1 2 3 4 5 6 7 8 9 7 1 0 0 0\n", [][]string{{"load1", "7"}, {"rawload1", "7"}}},
		{"0 1.25 2.5 4 1 2 5 3 3 6 4.5 4 1 2 3 4 5 6 7 8 9 0 1 0 0 0\n", [][]string{{"load1", "0"}}},
		{"1 2 3\n", [][]string{{"load1", "60"}}},
		{"", [][]string{{"status"}, {"barstatus"}, {"load1", "60"}, {"msgs"}, {"foo"}}},
		{"ok%20-1%20a%00b%zz%4", [][]string{{"relayok", "x"}, {"reread"}}},
		{strings.Repeat("I", 300000), [][]string{{"status"}, {"foo"}, {"rawstatus"}}},
	} {
		mu.Lock()
		reply = c.reply
		mu.Unlock()
		for _, cmd := range c.cmds {
			sameAsReference(t, false, "", append([]string{"-s", canned}, cmd...)...)
		}
	}

	// The request bytes: the server answers with their length and hash,
	// percent-encoded so that md-mx-ctrl's decoding restores them.
	echo := ctlServer(t, func(c net.Conn) {
		req := readRequest(c)
		_, _ = fmt.Fprintf(c, "%d %x%%0A", len(req), sha256.Sum256(req))
	})
	// A long line of many words. Where md-mx-ctrl must cut a line, and
	// for long words, its encoder writes past its buffer (undefined
	// behaviour; it may crash), so those cases are left to
	// muxctl.TestLine.
	var many []string
	for i := 0; i < 2000; i++ {
		many = append(many, fmt.Sprintf("w%d%%%s", i, strings.Repeat("x", 90)))
	}
	for _, args := range [][]string{
		{"a b", "%", `\'"`, "\x01\x7f\xff", "", "é"},
		{"load1 60"}, {"", ""},
		many,
	} {
		sameAsReference(t, false, "", append([]string{"-s", echo}, args...)...)
	}
	sameAsReference(t, false, "x y\n\nstatus\n"+strings.Repeat("z", 300000)+"\nfoo\x00bar\nlast", "-s", echo, "-i")

	// A server that closes without reading the request: the kernel resets
	// the connection.
	closer := ctlServer(t, func(c net.Conn) {
		one := make([]byte, 1)
		_, _ = io.ReadFull(c, one)
	})
	sameAsReference(t, false, "", "-s", closer, "status")
	sameAsReference(t, false, "msgs\n", "-s", closer, "-i")
}

// A server that never answers: where md-mx-ctrl hangs, sluice ctl gives up
// after its timeout with a read error and md-mx-ctrl's status.
func TestCtlTimeout(t *testing.T) {
	release := make(chan struct{})
	silent := ctlServer(t, func(c net.Conn) { readRequest(c); <-release })
	t.Cleanup(func() { close(release) })
	s := ctlSetup{prog: "sluice ctl", name: "sluice ctl", timeout: 100 * time.Millisecond, stdin: strings.NewReader("status\nfoo\n")}
	var out, errs bytes.Buffer
	code := runCtl(context.Background(), s, []string{"-s", silent, "load1", "60"}, &out, &errs)
	msg := "ERROR MXCommand: read: Connection timed out: Is multiplexor running?\n"
	if code != 1 || out.String() != "" || errs.String() != msg {
		t.Errorf("status %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
	out.Reset()
	errs.Reset()
	code = runCtl(context.Background(), s, []string{"-s", silent, "-i"}, &out, &errs)
	if code != 0 || out.String() != msg+msg || errs.String() != "" {
		t.Errorf("-i: status %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
}

// startForeground runs a daemon in the foreground until the test ends
// (SIGTERM, then SIGKILL after 30 s; its stderr is logged if the test
// failed) and waits until addr on network accepts a connection.
func startForeground(t *testing.T, name string, argv []string, network, addr string) {
	t.Helper()
	cmd := muxref.Command(t, argv...)
	stderr := &logbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial(network, addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nothing listens on %s; stderr:\n%s", name, addr, stderr.String())
		}
	}
}

// ctlSession runs every md-mx-ctrl command with both clients against the
// multiplexor at sock: before any traffic, after some, with a worker busy,
// in -i mode, and reread last.
func ctlSession(t *testing.T, sock string) {
	s := []string{"-s", sock}
	views := [][]string{
		{"status"}, {"rawstatus"}, {"barstatus"}, {"free"}, {"version"}, {"msgs"}, {"histo"},
		{"workers"}, {"slaves"}, {"busyworkers"}, {"workerinfo", "0"}, {"slaveinfo", "1"}, {"workerinfo", "x"}, {"workerinfo", "99"},
		{"load"}, {"load-relayok"}, {"load-senderok"}, {"load-recipok"},
		{"rawload"}, {"rawload-relayok"}, {"rawload-senderok"}, {"rawload-recipok"},
		{"hload"}, {"hload-relayok"}, {"hload-senderok"}, {"hload-recipok"},
		{"rawhload"}, {"rawhload-relayok"}, {"rawhload-senderok"}, {"rawhload-recipok"},
		{"load1", "60"}, {"rawload1", "600"}, {"load1", "5"}, {"load1", "x"}, {"rawload1", "5"},
		{"tick"}, {"foo_no_such_command"},
	}
	// jsonstatus and jsonload1 are 3.7.1's, which Debian's md-mx-ctrl
	// (3.3) sends on as unknown commands: TestCtlVsSluiceMux checks them.
	for _, v := range views {
		sameAsReference(t, false, "", append(s, v...)...)
	}
	sameAsReference(t, false, "", append(s, "-h")...)
	for _, cmd := range [][]string{
		{"relayok", "192.0.2.1", "host.example", "25", "10.0.0.1", "25", "NOQUEUE"},
		{"senderok", "<a@example.org>", "192.0.2.1", "host", "helo", "/tmp/x", "Q1"},
		{"recipok", "<b@example.org>", "<a@example.org>", "192.0.2.1", "host", "b", "helo", "/tmp/x", "Q1", "?", "?", "?"},
		{"scan", "Q1", "/tmp/x"},
		{"map", "raw", "OK%20x%00y"},
		{"map", "raw", "a%2541"},
		{"a b", "%", `\'"`, "é\x01"},
	} {
		sameAsReference(t, false, "", append(s, cmd...)...)
	}
	for _, v := range views {
		sameAsReference(t, false, "", append(s, v...)...)
	}

	// One worker busy for a while.
	busy := make(chan string, 1)
	go func() {
		c, err := net.Dial("unix", sock)
		if err != nil {
			busy <- err.Error()
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "sleep 6000\n")
		b, _ := io.ReadAll(c)
		busy <- string(b)
	}()
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(muxQuery(t, sock, "status\n"), "B"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker never went busy")
		}
	}
	for _, v := range [][]string{{"status"}, {"barstatus"}, {"busyworkers"}, {"workers"}, {"load1", "60"}, {"free"}} {
		sameAsReference(t, false, "", append(s, v...)...)
	}
	if r := <-busy; r != "slept 6000\n" {
		t.Errorf("the busy worker answered %q", r)
	}

	// The whole batch of one client runs before the other's, so it holds
	// nothing that shows what the other's batch changed (NumRequests).
	sameAsReference(t, false, "status\nbarstatus\nrawload1 60\nload1 60\nload1 5\nmsgs\nmap raw a%2541\nfoo bar\nhload\n", append(s, "-i")...)
	sameAsReference(t, false, "", append(s, "reread")...)
}

func TestCtlVsReferenceMux(t *testing.T) {
	needReferenceCtl(t)
	muxref.Mux(t)
	_, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	sock := spool + "/mx.sock"
	startForeground(t, "reference", append([]string{referenceMux, "-D", "-z", spool, "-s", sock, "-f", worker, "-m", "2", "-x", "4", "-q", "3"}, uarg...), "unix", sock)
	ctlSession(t, sock)
}

// sluice ctl against sluice's own multiplexor, still side by side with
// md-mx-ctrl (which must also agree with sluice mux); without the
// reference client, the formatted views are checked on their own.
func TestCtlVsSluiceMux(t *testing.T) {
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	sock := spool + "/mx.sock"
	startForeground(t, "sluice", append([]string{bin, "mux", "-D", "-z", spool, "-s", sock, "-f", worker, "-m", "2", "-x", "4", "-q", "3"}, uarg...), "unix", sock)
	r := ourCtl(false, "", "-s", sock, "status")
	if r.code != 0 || !strings.HasPrefix(r.out, "Max workers: 4\nWorker 0: ") || strings.Count(r.out, "\n") != 5 {
		t.Errorf("status: %v", r)
	}
	r = ourCtl(false, "", "-s", sock, "load1", "60")
	if r.code != 0 || !strings.HasPrefix(r.out, "Statistics for last 60 seconds:\n") || !strings.Contains(r.out, "Queue:  size=3 queued=0\n") {
		t.Errorf("load1 60: %v", r)
	}
	r = ourCtl(false, "", "-s", sock, "map", "raw", "OK%20x")
	if r.code != 0 || r.out != "OK x\n" {
		t.Errorf("map raw: %v", r)
	}
	ctlJSONSameState(t, sock)
	needReferenceCtl(t)
	ctlSession(t, sock)
}

// ctlJSONSameState checks jsonstatus and jsonload1 60 (md-mx-ctrl 3.7.1's
// JSON, parsed with encoding/json) against status and load1 60 of the
// same, idle pool: a worker per slot, the same state, the same counts;
// the host's name and a timestamp taken during the exchange.
func ctlJSONSameState(t *testing.T, sock string) {
	t.Helper()
	host, _ := os.Hostname()
	before := time.Now().Truncate(time.Second)
	js := ourCtl(false, "", "-s", sock, "jsonstatus")
	st := ourCtl(false, "", "-s", sock, "status")
	jl := ourCtl(false, "", "-s", sock, "jsonload1", "60")
	l1 := ourCtl(false, "", "-s", sock, "load1", "60")
	after := time.Now()
	if js.code != 0 || st.code != 0 || jl.code != 0 || l1.code != 0 || strings.HasSuffix(js.out, "\n") || !strings.HasSuffix(jl.out, "}\n") {
		t.Fatalf("jsonstatus %v\nstatus %v\njsonload1 %v\nload1 %v", js, st, jl, l1)
	}
	var status map[string]string
	if err := json.Unmarshal([]byte(js.out), &status); err != nil {
		t.Fatalf("jsonstatus: %v: %q", err, js.out)
	}
	stamp, err := time.ParseInLocation("Mon Jan _2 15:04:05 2006", status["timestamp"], time.Local)
	if err != nil || stamp.Before(before) || stamp.After(after) || status["hostname"] != host {
		t.Errorf("jsonstatus timestamp %q (%v), hostname %q: want between %v and %v, %q", status["timestamp"], err, status["hostname"], before, after, host)
	}
	lines := strings.Split(strings.TrimSuffix(st.out, "\n"), "\n")[1:] // "Worker N: state"
	if len(status) != 2+len(lines) {
		t.Errorf("jsonstatus has %d fields for %d workers: %q", len(status), len(lines), js.out)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("Worker %d: %s", i, status[fmt.Sprintf("Worker%d", i)]); l != want {
			t.Errorf("status %q, jsonstatus says %q", l, want)
		}
	}
	var load map[string]any
	if err := json.Unmarshal([]byte(jl.out), &load); err != nil {
		t.Fatalf("jsonload1: %v: %q", err, jl.out)
	}
	for _, c := range [][2]string{{"Scan", "scan"}, {"Relayok", "relayok"}, {"Senderok", "senderok"}, {"Recipok", "recipok"}} {
		if row := fmt.Sprintf("\n%10s %15v ", c[0], load[c[1]]); !strings.Contains(l1.out, row) {
			t.Errorf("jsonload1 %s=%v, load1 has no row %q:\n%s", c[1], load[c[1]], row, l1.out)
		}
	}
	if !strings.Contains(l1.out, fmt.Sprintf("Workers: busy=%v idle=%v stopped=%v killed=%v\n", load["busyworkers"], load["idleworkers"],
		load["stoppedworkers"], load["killedworkers"])) || !strings.Contains(l1.out, fmt.Sprintf("Queue:  size=%v queued=%v\n",
		load["queue_size"], load["queued_requests"])) || load["hostname"] != host || len(load) != 12 {
		t.Errorf("jsonload1 %q does not match load1:\n%s", jl.out, l1.out)
	}
}
