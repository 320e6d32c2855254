package syslog

import (
	"bytes"
	"log/slog"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
