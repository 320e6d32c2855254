package cli

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
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

// TestServeSyslogQuotesPeerValues: a sender a remote client chose to
// forge log fields, refused through the real policy door of a daemon
// logging to syslog (a datagram socket standing in for /dev/log), is one
// quoted key= value in the refusal's line, escaped as the text format
// escapes it, and no datagram carries a control byte.
func TestServeSyslogQuotesPeerValues(t *testing.T) {
	dir := t.TempDir()
	logSock := filepath.Join(dir, "log")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: logSock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	path := filepath.Join(dir, "sluice.toml")
	writeFile(t, path, fmt.Sprintf(`state_dir = %q
[log]
output = "syslog"
syslog_socket = %q
[[class]]
name = "rest"
match = ["*"]
[anvil]
enabled = false
[milter]
enabled = false
[throttle]
enabled = false
[policy]
listen = ["unix:policy"]
[[policy.rule]]
name = "r"
count = "messages"
key = ["sender"]
limit = ["1/60s exact"]
[web]
listen = ["unix:web"]
`, dir, logSock))
	startServe(t, path)
	const sender = "\"x level=ERROR msg=forged\"@x.example\x1b[31m\r"
	c, err := net.Dial("unix", filepath.Join(dir, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for range 2 {
		fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.7\nsender=%s\n\n", sender)
		for range 2 {
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
	}
	buf := make([]byte, 8192)
	var got []string
	for {
		_ = pc.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, err := pc.Read(buf)
		if err != nil {
			t.Fatalf("no refusal logged (%v); got:\n%s", err, strings.Join(got, "\n"))
		}
		line := string(buf[:n])
		got = append(got, line)
		for i := 0; i < len(line); i++ {
			if line[i] < 0x20 || line[i] == 0x7f {
				t.Fatalf("byte %#02x in datagram %q", line[i], line)
			}
		}
		if _, attrs, ok := strings.Cut(line, ": policy: over the limit "); ok {
			fields := map[string]string{}
			for attrs != "" { // logfmt: key=value, the value bare or quoted
				k, v, _ := strings.Cut(attrs, "=")
				if q, err := strconv.QuotedPrefix(v); err == nil {
					attrs = strings.TrimPrefix(v[len(q):], " ")
					v, _ = strconv.Unquote(q)
				} else {
					v, attrs, _ = strings.Cut(v, " ")
				}
				if _, dup := fields[k]; dup || strings.Contains(k, " ") {
					t.Fatalf("field %q twice or broken in %q", k, line)
				}
				fields[k] = v
			}
			if fields["sender"] != sender || fields["key"] != "sender="+strings.ToLower(sender) || fields["level"] != "" || fields["msg"] != "" ||
				fields["door"] != "policy" || fields["verdict"] != "refused" || fields["reason"] != "limit" || len(fields) != 11 {
				t.Errorf("refusal line %q: fields %q", line, fields)
			}
			return
		}
	}
}
