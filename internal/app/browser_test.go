package app

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/muxref"
	"sluice/internal/testutil/peer"

	"sluice/internal/config"
	"sluice/internal/milter/wire"
	"sluice/internal/pool/pooltest"
	"sluice/internal/status"
	"sluice/internal/testutil/chromiumtest"
)

// The browser test loads the status page of a running daemon in headless
// Chromium (the Debian package chromium) and reads the DOM the page's
// script built from /status.json. The daemon shows a real worker pool:
// MIMEDefang's mimedefang-multiplexor running the fake worker of the pool
// tests. SLUICE_CHROMIUM names another browser binary; SLUICE_ARTIFACTS is
// where the screenshot is kept.

// referenceMux is MIMEDefang's multiplexor (the Debian package mimedefang),
// by its installed name; muxref runs the real one (not sluice's drop-in).
const referenceMux = muxref.MultiplexorPath

// startMultiplexor runs mimedefang-multiplexor in the foreground with 4
// slots (2 started at once) of the fake worker, as the user defang when
// the test runs as root, and returns its socket. It is stopped with
// SIGTERM when the test ends. It skips, loudly, without the multiplexor.
func startMultiplexor(t *testing.T) string {
	t.Helper()
	muxref.Mux(t)
	var uarg []string
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u := peer.User(t, "defang")
		uarg = []string{"-U", "defang"}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	// The worker program and the spool must be reachable by defang:
	// t.TempDir's parents are private.
	mkdir := func(pattern string) string {
		d, err := os.MkdirTemp("", pattern)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	worker, err := pooltest.BuildFakeWorker(mkdir("sluice-app-bin"))
	if err != nil {
		t.Fatal(err)
	}
	spool := mkdir("sluice-app-spool")
	if uid >= 0 {
		if err := os.Chown(spool, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(spool, "mx.sock")
	args := append([]string{"-D", "-z", spool, "-s", sock, "-f", worker, "-m", "2", "-x", "4", "-b", "600"}, uarg...)
	cmd := muxref.Command(t, append([]string{referenceMux}, args...)...)
	var out logbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(30 * time.Second):
			t.Errorf("%s ignored SIGTERM for 30 s", referenceMux)
			_ = cmd.Process.Kill()
			<-waited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", referenceMux, out.String())
		}
	})
	// Ready when both workers of -m 2 are idle.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(25 * time.Millisecond) {
		if r, err := muxAsk(sock, "status\n"); err == nil && strings.HasPrefix(r, "II") {
			return sock
		}
		select {
		case err := <-waited:
			waited <- err
			t.Fatalf("%s exited: %v\n%s", referenceMux, err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never had two idle workers:\n%s", referenceMux, out.String())
		}
	}
}

// muxAsk sends one request to a multiplexor and reads its reply line.
func muxAsk(sock, req string) (string, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// TestBrowserDaemonStatus: the status page of a running daemon, loaded in
// headless Chromium, shows what the test made happen in that daemon: two
// milter sessions held against the class's cap of 3, policy refusals
// with their explanation, and the multiplexor's pool with one worker
// busy; and a screenshot is kept.
func TestBrowserDaemonStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bin := chromiumtest.Binary(t)
	muxSock := startMultiplexor(t)

	dir := t.TempDir()
	// max_streams = 0: the page polls. A daemon's event stream lasts ten
	// minutes, and an open stream holds the headless browser's virtual
	// time (it never finishes loading).
	body := strings.Replace(webConfig(dir, fmt.Sprintf("max_streams = 0\nmux_socket = %q\n", muxSock)), "refuse = 1", "refuse = 3", 1)
	cfg, errs := config.Load(writeConfig(t, dir, body))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	d, err := New(cfg, cfg.File, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.SetVersion("browser-test-7f3a") // before Start: the sampler reads it
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	base := webURL(t, d)

	// A worker busy for as long as the test runs: "hang" never answers
	// (the busy timeout is 10 minutes). The connection closes first at
	// cleanup, then the multiplexor stops and kills the worker.
	hung, err := net.Dial("unix", muxSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Close() })
	if _, err := hung.Write([]byte("hang\n")); err != nil {
		t.Fatal(err)
	}
	// Two milter sessions held in the loopback class (cap 3).
	msock := filepath.Join(dir, "milter")
	for _, a := range []string{"127.0.0.1", "127.0.0.2"} {
		if _, r := dialMilter(t, msock, "["+a+"]", a); r.Code() != wire.RespContinue {
			t.Fatalf("milter session from %s: %s", a, replyText(r))
		}
	}
	// Eight messages from one sender against 5 a minute.
	if verbs := drivePolicy(t, filepath.Join(dir, "policy"), "flood@example.org", 8); verbs["DEFER_IF_PERMIT"] != 3 {
		t.Fatalf("policy answers %v, want 3 refusals", verbs)
	}

	// Load the page once the daemon's own sample shows all of it.
	eventually(t, "the status showing the busy worker and the held sessions", func() (bool, string) {
		st := getStatus(t, base)
		busy := 0
		if st.Pool != nil {
			for _, s := range st.Pool.Slots {
				if s.State == status.SlotBusy {
					busy++
				}
			}
		}
		ok := busy == 1 && len(st.Classes) > 0 && st.Classes[0].Incoming == 2 && len(st.Refusals) == 3
		return ok, fmt.Sprintf("pool %+v classes %+v refusals %d", st.Pool, st.Classes, len(st.Refusals))
	})

	dom := string(chromiumtest.Run(t, bin, base+"/", 3*time.Second, "--dump-dom"))
	checks := []struct{ what, re string }{
		{"the daemon's version", `<dt>version</dt><dd>browser-test-7f3a</dd>`},
		{"the configuration generation", `<dt>config</dt><dd>gen 1, `},
		{"the class occupancy against its cap", `data-class="loopback">.*?<span class="fig">2 / 3</span>`},
		{"the uncapped class", `data-class="rest">.*?<span class="fig">0 / ∞</span>`},
		{"the deferred sender's key", `<td class="key">sender=flood@example\.org</td>`},
		{"the refusal's count against its limit", `<td class="num">5 / 5 per 60s</td><td>exact</td>`},
		{"the refusal's verdict", `<span class="verdict defer">DEFER_IF_PERMIT</span>`},
		{"the refusal's reply", `<td class="reply">DEFER_IF_PERMIT 4\.7\.1 slow down, sender=flood@example\.org</td>`},
		{"the busy worker's bar", `<div class="slot" data-slot="\d" data-state="B">`},
		{"the pool summary", `id="pool-summary">1 busy · \d idle · \d stopped · queue 0/\d+`},
		{"the doors", `<b>milter</b> unix:milter · 2 conn`},
		{"polling", `data-mode="polling"`},
	}
	for _, c := range checks {
		if !regexp.MustCompile(c.re).MatchString(dom) {
			t.Errorf("the rendered page lacks %s (%s)", c.what, c.re)
		}
	}
	if n := len(regexp.MustCompile(`<div class="slot" data-slot="\d+" data-state="[SIBK]">`).FindAllString(dom, -1)); n != 4 {
		t.Errorf("the page shows %d slot bars, want the multiplexor's 4", n)
	}
	if t.Failed() {
		t.Logf("rendered DOM:\n%s", dom)
	}

	out := os.Getenv("SLUICE_ARTIFACTS")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(out, "daemon-status.png")
	chromiumtest.Run(t, bin, base+"/", 3*time.Second, "--window-size=1280,1000", "--screenshot="+shot)
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s is not a PNG", shot)
	}
	t.Logf("screenshot of the daemon's status page: %s", shot)
}
