package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/status"
	"sluice/internal/testutil/logbuf"
)

// TestMuxWebMetrics: with SLUICE_MUX_WEB set, `sluice mux` serves its pool
// on a status page and counts kills by reason and busy timeouts in
// /metrics.
func TestMuxWebMetrics(t *testing.T) {
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	sock := filepath.Join(spool, "mx.sock")
	webSock := filepath.Join(spool, "web.sock")
	cmd := exec.Command(bin, append([]string{"mux", "-D", "-z", spool, "-s", "unix:" + sock, "-f", worker, "-m", "2", "-x", "3", "-w", "1", "-b", "1"}, uarg...)...)
	cmd.Env = append(os.Environ(), muxWebEnv+"=unix:"+webSock)
	stderr := &logbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", webSock)
	}}}
	get := func(path string) string {
		t.Helper()
		resp, err := client.Get("http://mux" + path)
		if err != nil {
			t.Fatalf("GET %s: %v\nstderr:\n%s", path, err, stderr.String())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(webSock); err == nil {
			if _, err := os.Stat(sock); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sockets; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A worker that never answers is killed after the 1 s busy timeout.
	if got := muxQuery(t, sock, "hang\n"); !strings.HasPrefix(got, "ERR Filter timed out") {
		t.Fatalf("hang: %q", got)
	}
	for {
		m := get("/metrics")
		if strings.Contains(m, `sluice_pool_kills_total{reason="busy_timeout"} 1`) &&
			strings.Contains(m, "sluice_pool_busy_timeouts_total 1") &&
			strings.Contains(m, "sluice_pool_activations_total") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics without the busy timeout:\n%s", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Only the pool's series: the multiplexor has no limiter, throttle
	// or configuration to reload.
	if m := get("/metrics"); strings.Contains(m, "sluice_throttle_") || strings.Contains(m, "sluice_config_") ||
		strings.Contains(m, "sluice_decisions_") || strings.Contains(m, "sluice_store_") || strings.Contains(m, "sluice_class_") {
		t.Errorf("the multiplexor serves series that mean nothing in it:\n%s", m)
	}
	var st status.Status
	if err := json.Unmarshal([]byte(get("/status.json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Pool == nil || len(st.Pool.Slots) != 3 {
		t.Fatalf("status pool: %+v", st.Pool)
	}
	if !strings.Contains(get("/"), "<html") {
		t.Error("no status page")
	}
}
