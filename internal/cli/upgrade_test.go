package cli

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestRestartWithPassedSocket does what `systemctl restart sluice` does
// with the socket unit: the listening socket belongs to the caller (here
// the test, as systemd), sluice gets it as LISTEN_FDS; the daemon is
// stopped with SIGTERM and, once it exited, started again with the same
// socket. 64 policy clients on persistent connections keep sending,
// retrying a failed request once on a new connection (Postfix's
// smtpd_policy_service_try_limit is 2). No request may fail after its
// retry; the first-attempt failures, the longest wait and the gap are
// logged (docs/reliability.md).
func TestRestartWithPassedSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("two daemons under load")
	}
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, senderPolicy("unix:policy", "1000000/60s exact"), "anvil", "milter", "throttle")
	sock := filepath.Join(dir, "policy")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	lf, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	p1 := serveFromSystemd(t, bin, lf, "policy", "serve", "-c", cfg)

	const conns = 64
	var ok, firstFail, failed atomic.Int64
	var maxWait atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			var r *bufio.Reader
			ask := func(req string) bool {
				if c == nil {
					var err error
					if c, err = net.Dial("unix", sock); err != nil {
						return false
					}
					r = bufio.NewReader(c)
				}
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.Write([]byte(req)); err == nil {
					if line, err := r.ReadString('\n'); err == nil && strings.HasPrefix(line, "action=") {
						if blank, err := r.ReadString('\n'); err == nil && blank == "\n" {
							return true
						}
					}
				}
				c.Close()
				c = nil
				return false
			}
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req := fmt.Sprintf("request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.%d\nsender=u%d@example.org\ninstance=%d.%d\nrecipient_count=1\n\n", w, w, w, i)
				t0 := time.Now()
				good := ask(req)
				if !good {
					firstFail.Add(1)
					good = ask(req) // Postfix tries twice
				}
				if d := int64(time.Since(t0)); d > maxWait.Load() {
					maxWait.Store(d) // racy max, good enough for a report
				}
				if good {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	waitUntil(t, "load running", func() bool { return ok.Load() > 20_000 }, func() string { return fmt.Sprint(ok.Load(), " answers") })
	before := ok.Load()
	stopAt := time.Now()
	p1.cmd.Process.Signal(syscall.SIGTERM)
	if err := p1.wait(t, 60*time.Second); err != nil {
		t.Fatalf("first daemon: %v\n%s", err, p1.stderr.String())
	}
	exited := time.Now()
	p2 := servePassedSocket(t, bin, lf, "policy", "serve", "-c", cfg)
	waitUntil(t, "the second daemon answers", func() bool { return ok.Load() > before+20_000 }, func() string { return p2.stderr.String() })
	close(stop)
	wg.Wait()
	t.Logf("restart with the socket held: old daemon exited %v after SIGTERM; %d answers in all, %d first attempts failed (retried), %d requests failed after the retry; longest wait for an answer %v",
		exited.Sub(stopAt).Round(time.Millisecond), ok.Load(), firstFail.Load(), failed.Load(), time.Duration(maxWait.Load()).Round(time.Millisecond))
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed even after a retry", failed.Load())
	}
	if !strings.Contains(p2.stderr.String(), "from_systemd=true") {
		t.Fatalf("second daemon did not take the socket:\n%s", p2.stderr.String())
	}
}
