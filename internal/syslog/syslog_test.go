package syslog

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/wait"
)

// Syslog sends "<PRI>Mmm dd hh:mm:ss tag[pid]: message" datagrams; without
// a socket it falls back to its writer after one notice.
func TestSyslog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	code, ok := FacilityCode("LOG_Local3")
	if !ok || code != 19 {
		t.Fatalf("local3: %d %v", code, ok)
	}
	s := Open(Options{Path: path, Tag: "mdtest", Facility: code, PID: 42})
	log := slog.New(s.Handler(slog.LevelDebug))
	log.Info("Starting worker 0 (pid 7) (1 running): Bringing workers up to minWorkers (1)")
	log.Error("oops", "err", "boom")
	log.Debug("quiet")
	s.Close()
	re := regexp.MustCompile(`^<(\d+)>\w{3} [ \d]\d \d\d:\d\d:\d\d mdtest\[42\]: (.*)$`)
	want := [][2]string{{"158", "Starting worker 0 (pid 7) (1 running): Bringing workers up to minWorkers (1)"}, {"155", "oops err=boom"}, {"159", "quiet"}}
	buf := make([]byte, 4096)
	for _, w := range want {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		g := re.FindStringSubmatch(string(buf[:n]))
		if g == nil || g[1] != w[0] || g[2] != w[1] {
			t.Errorf("got %q, want <%s> ... %q", buf[:n], w[0], w[1])
		}
	}

	var fb bytes.Buffer // Close waits for the writer goroutine
	s = Open(Options{Path: filepath.Join(t.TempDir(), "none"), Tag: "mdtest", Fallback: &fb, PID: 42})
	if !s.Fallback() {
		t.Fatal("no fallback")
	}
	log = slog.New(s.Handler(slog.LevelInfo))
	log.Info("one")
	log.Info("two")
	s.Close()
	lines := strings.Split(strings.TrimSuffix(fb.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "cannot reach syslog") ||
		!strings.HasSuffix(lines[1], " mdtest[42]: one") || !strings.HasSuffix(lines[2], " mdtest[42]: two") {
		t.Errorf("fallback output:\n%s", fb.String())
	}
}

// A value a peer chose (a MAIL FROM, a HELO name) is one quoted, escaped
// value, as slog's TextHandler writes it: a forged sender brings no
// level=ERROR field, and no byte below 0x20, no DEL and no C1 control
// reaches the syslog socket, in the attributes, the groups or the
// message. Log's own callers (the mux) get the same quoting.
func TestSyslogQuotesPeerValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := Open(Options{Path: path, Tag: "sluice", Facility: Facilities["mail"], PID: 42})
	log := slog.New(s.Handler(slog.LevelInfo))
	const forged = `"x level=ERROR msg=forged"@x.example`
	const hostile = "a b\r\nc\x1b]0;pwned\x07\x1b[31m\x7f\u009b\x9b\xff\u202ez"
	log.Info("policy: over limit", "sender", forged, "n", 3)
	log.With("door", "policy").WithGroup("req").Warn("policy: decision", "helo", hostile, "plain", "mx.example")
	log.Error("bad\x1b[2Jmessage\n", "err", "boom")
	s.Log(6, "Worker 0 stderr: \x1b]0;pwned\x07")
	s.Log(6, "Worker 0 stderr: plain text, kept")
	s.Close()
	want := []string{
		`policy: over limit sender="\"x level=ERROR msg=forged\"@x.example" n=3`,
		`policy: decision door=policy req.helo="a b\r\nc\x1b]0;pwned\a\x1b[31m\x7f\u009b\x9b\xff\u202ez" req.plain=mx.example`,
		`"bad\x1b[2Jmessage\n" err=boom`,
		`"Worker 0 stderr: \x1b]0;pwned\a"`,
		`Worker 0 stderr: plain text, kept`,
	}
	buf := make([]byte, 4096)
	for i, w := range want {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		line := buf[:n]
		for _, b := range line {
			if b < 0x20 || b == 0x7f || b >= 0x80 {
				t.Errorf("datagram %d has byte %#02x: %q", i, b, line)
				break
			}
		}
		_, msg, _ := strings.Cut(string(line), " sluice[42]: ")
		if msg != w {
			t.Errorf("datagram %d:\n got %s\nwant %s", i, msg, w)
		}
	}
	// The forged sender as a logfmt reader sees the first line: two
	// fields, the sender whole.
	fields := logfmt(t, strings.TrimPrefix(want[0], "policy: over limit "))
	if len(fields) != 2 || fields["sender"] != forged || fields["n"] != "3" {
		t.Errorf("fields %q", fields)
	}
}

// logfmt reads "key=value ..." where a value is bare or quoted as
// strconv.Quote writes it.
func logfmt(t *testing.T, s string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || k == "" || strings.ContainsAny(k, ` "`) {
			t.Fatalf("not logfmt at %q", s)
		}
		v := rest
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				t.Fatalf("bad quoted value at %q: %v", rest, err)
			}
			if v, err = strconv.Unquote(q); err != nil {
				t.Fatal(err)
			}
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
		}
		if _, dup := m[k]; dup {
			t.Fatalf("field %s twice", k)
		}
		m[k] = v
		s = strings.TrimPrefix(rest, " ")
	}
	return m
}

// A message the syslog daemon cannot take once it is gone goes to the
// fallback writer after one notice per outage; once the daemon is back,
// messages reach it again. Reachable says which it is.
func TestSyslogOutageFallsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	listen := func() *net.UnixConn {
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	recv := func(c *net.UnixConn, want string) {
		t.Helper()
		buf := make([]byte, 4096)
		_ = c.SetReadDeadline(time.Now().Add(wait.Timeout))
		n, err := c.Read(buf)
		if err != nil || !strings.HasSuffix(string(buf[:n]), "mdtest[42]: "+want) {
			t.Fatalf("datagram %q, %v; want ... %q", buf[:n], err, want)
		}
	}
	c := listen()
	var fb logbuf.Buffer
	s := Open(Options{Path: path, Tag: "mdtest", Fallback: &fb, PID: 42})
	defer s.Close()
	if s.Fallback() || Reachable(path) != nil {
		t.Fatalf("%s unreachable: %v", path, Reachable(path))
	}
	s.Log(6, "one")
	recv(c, "one")
	c.Close() // the daemon is gone, and so is its socket
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if Reachable(path) == nil {
		t.Fatal("a removed socket is reachable")
	}
	s.Log(6, "two")
	s.Log(6, "three")
	wait.For(t, func() bool { return strings.HasSuffix(fb.String(), " mdtest[42]: three\n") }, "the fallback to get %q", "three")
	c = listen()
	defer c.Close()
	s.Log(6, "four")
	recv(c, "four")
	lines := fb.Lines("")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "mdtest: cannot send to syslog at "+path+" (") ||
		!strings.HasSuffix(lines[1], " mdtest[42]: two") || strings.HasPrefix(lines[1], "<") || !strings.HasSuffix(lines[2], " mdtest[42]: three") {
		t.Errorf("fallback output:\n%s", fb.String())
	}
}
