package main

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/bench/internal/fakeserver"
	"sluice/bench/internal/loadgen"
)

// fakeMux answers one line per connection, as the multiplexor does:
// relayok with "ok 1 ...", scan with "ok", status with a status line; a
// request containing "bad" gets the no-free-workers error.
func fakeMux(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "muxload")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "mx.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	fakeserver.Start(t, ln, func(c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		var reply string
		switch word, _, _ := strings.Cut(line, " "); {
		case strings.Contains(line, "bad"):
			reply = "error: No free workers\n"
		case word == "relayok":
			reply = "ok 1 ok 250 2.1.0 0\n"
		case word == "scan":
			reply = "ok\n"
		default:
			reply = "IIBS 12 4 0 0 7\n"
		}
		_, _ = c.Write([]byte(reply))
	})
	return path
}

func TestRun(t *testing.T) {
	sock := fakeMux(t)
	for _, cmd := range []string{"relayok", "scan", "status"} {
		cfg := config{socket: sock, Flags: loadgen.Flags{Conns: 4, Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond, Label: "fake"},
			cmd: cmd, scanDir: "/var/spool/MIMEDefang/mdefang-x y", timeout: 10 * time.Second}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		var logw bytes.Buffer
		res := run(cfg, &logw)
		if res.Reqs == 0 || res.Errors != 0 || res.P50us <= 0 || res.P99us < res.P50us {
			t.Errorf("%s: %v\n%s", cmd, res, logw.String())
		}
	}
	// An error reply counts as an error.
	cfg := config{socket: sock, Flags: loadgen.Flags{Conns: 1, Duration: 50 * time.Millisecond, Label: "fake"}, cmd: "scan", scanDir: "/bad", timeout: 10 * time.Second}
	var logw bytes.Buffer
	if res := run(cfg, &logw); res.Errors == 0 || res.Reqs != 0 || !strings.Contains(logw.String(), "No free workers") {
		t.Errorf("error replies: %v\n%s", res, logw.String())
	}
}

func TestOnceAndFlags(t *testing.T) {
	sock := fakeMux(t)
	var out, errw bytes.Buffer
	if code := realMain([]string{"-socket", sock, "-once", "status"}, &out, &errw); code != 0 || out.String() != "IIBS 12 4 0 0 7\n" {
		t.Errorf("-once: %d %q %q", code, out.String(), errw.String())
	}
	for _, args := range [][]string{{}, {"-socket", sock, "-cmd", "scan"}, {"-socket", sock, "-cmd", "nope"}, {"-socket", sock, "-c", "0"}} {
		if code := realMain(args, &out, &errw); code != 2 {
			t.Errorf("%q: exit %d", args, code)
		}
	}
	if code := realMain([]string{"-socket", filepath.Join(t.TempDir(), "none"), "-once", "status"}, &out, &errw); code != 1 {
		t.Errorf("no server: exit %d", code)
	}
}

func TestValidStatus(t *testing.T) {
	for s, want := range map[string]bool{
		"IIBS 12 4 0 0 7\n": true, "K 0 0 0 0 0\n": true, "IIBS 12 4 0 0 7": false,
		"IXBS 1 2 3 4 5\n": false, "II 1 2 3 4\n": false, " 1 2 3 4 5\n": false, "II 1 2 x 4 5\n": false,
	} {
		if got := validStatus([]byte(s)); got != want {
			t.Errorf("%q: %v", s, got)
		}
	}
}
