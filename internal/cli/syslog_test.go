package cli

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeLogsToSyslog: with [log] output = "syslog", `sluice serve`
// sends its log to the syslog socket as openlog(3) with LOG_PID would,
// at the configured facility and tag, and nothing to stderr; without a
// syslog socket it says so once and logs to stderr.
func TestServeLogsToSyslog(t *testing.T) {
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	logSock := filepath.Join(dir, "log")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: logSock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	cfg := filepath.Join(dir, "sluice.toml")
	config := func(sock string) string {
		return fmt.Sprintf(`state_dir = %q
[log]
output = "syslog"
facility = "local3"
tag = "sluice-mx1"
syslog_socket = %q
[anvil]
listen = ["unix:anvil"]
[policy]
enabled = false
[throttle]
enabled = false
[milter]
enabled = false
`, dir, sock)
	}
	writeFile(t, cfg, config(logSock))
	p := relStart(t, bin, []string{"serve", "-c", cfg}, filepath.Join(dir, "anvil"))
	// local3 (19) << 3 | info (6) = 158.
	re := regexp.MustCompile(`^<158>\w{3} [ \d]\d \d\d:\d\d:\d\d sluice-mx1\[(\d+)\]: anvil service listening listen=unix:anvil `)
	buf := make([]byte, 8192)
	var got []string
	for {
		_ = pc.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := pc.Read(buf)
		if err != nil {
			t.Fatalf("no 'anvil service listening' datagram (%v); got %q\nstderr:\n%s", err, got, p.stderr.String())
		}
		got = append(got, string(buf[:n]))
		if m := re.FindStringSubmatch(string(buf[:n])); m != nil {
			if m[1] != fmt.Sprint(p.cmd.Process.Pid) {
				t.Errorf("pid %s in %q, want %d", m[1], buf[:n], p.cmd.Process.Pid)
			}
			break
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
	if s := p.stderr.String(); s != "" {
		t.Errorf("stderr with syslog output: %q", s)
	}

	// No syslog daemon: one notice, then the log on stderr.
	writeFile(t, cfg, config(filepath.Join(dir, "nothing")))
	p = relStart(t, bin, []string{"serve", "-c", cfg}, filepath.Join(dir, "anvil"))
	// The socket answers once bound, before the start is over; a SIGTERM
	// then stops the start (exit 1). Wait until it serves.
	waitUntil(t, "the daemon serves", func() bool { return strings.Contains(p.stderr.String(), "sluice started") },
		func() string { return p.stderr.String() })
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
	lines := strings.Split(p.stderr.String(), "\n")
	if !strings.Contains(lines[0], "cannot reach syslog at "+filepath.Join(dir, "nothing")) || !strings.Contains(p.stderr.String(), "sluice-mx1[") {
		t.Errorf("without a syslog socket, stderr:\n%s", p.stderr.String())
	}
}
