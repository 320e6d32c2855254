package cli

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestRefusalFloodLogVolume: 101,000 policy requests from 1,000 senders
// paced over 10 s, each sender allowed 1 per 60 s: 100,000 refusals. The
// daemon's log (stderr) stays bounded: at most a first line and a summary
// per sender, under the ceiling of lines a second, with notices of what
// was suppressed. The line count and bytes a second are logged
// (docs/reliability.md). SLUICE_FLOOD_BIN runs another sluice binary
// instead (to measure an older one).
func TestRefusalFloodLogVolume(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s flood")
	}
	bin := os.Getenv("SLUICE_FLOOD_BIN")
	if bin == "" {
		bin = buildSluice(t)
	}
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, senderPolicy("unix:policy", "1/60s exact"), "anvil", "milter", "throttle")
	sock := filepath.Join(dir, "policy")
	p := relStart(t, bin, []string{"serve", "-c", cfg}, sock)
	startBytes := len(p.stderr.String())
	const keys, total, conns = 1000, 101_000, 16
	span := 10 * time.Second
	var sent, refused, failed atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", sock)
			if err != nil {
				failed.Add(1)
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for i := w; i < total; i += conns {
				// Paced: request i is due at i/total of the span.
				if d := time.Until(start.Add(time.Duration(int64(span) * int64(i) / total))); d > 0 {
					time.Sleep(d)
				}
				fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.%d\nsender=user%d@example.org\ninstance=%x\nrecipient_count=1\n\n", i%250, i%keys, i)
				line, err := r.ReadString('\n')
				if err != nil {
					failed.Add(1)
					return
				}
				r.ReadString('\n')
				sent.Add(1)
				if strings.Contains(line, "DEFER") {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	during := p.stderr.String()[startBytes:]
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t, 60*time.Second)
	after := p.stderr.String()[startBytes:]
	count := func(s, what string) int { return strings.Count(s, what) }
	t.Logf("%d requests (%d refused, %d failed) in %v: during the flood %d log lines, %d bytes (%.0f bytes/s): %d first lines, %d suppression notices; with the shutdown %d lines, %d bytes (%d summaries)",
		sent.Load(), refused.Load(), failed.Load(), took.Round(time.Millisecond),
		count(during, "\n"), len(during), float64(len(during))/took.Seconds(), count(during, "over the limit"), count(during, "lines suppressed"),
		count(after, "\n"), len(after), count(after, "more refused in"))
	if failed.Load() > 0 || refused.Load() != total-keys {
		t.Fatalf("%d failed, %d refused; want 0 and %d", failed.Load(), refused.Load(), total-keys)
	}
	if os.Getenv("SLUICE_FLOOD_BIN") != "" {
		return // measuring another binary: no bounds to hold it to
	}
	// At most the ceiling (200 a second) plus a notice a second, over the
	// flood and the shutdown.
	if n, bound := count(after, "\n"), int(took/time.Second+3)*(200+2); n > bound {
		t.Fatalf("%d log lines, more than %d:\n%.3000s", n, bound, after)
	}
	if count(after, "over the limit") > keys {
		t.Fatalf("%d first lines for %d keys", count(after, "over the limit"), keys)
	}
}
