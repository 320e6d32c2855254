package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The daemons the tests run in this process leave its GOMAXPROCS alone.
func init() { setProcs = func(int) int { return 0 } }

// TestApplyProcs: procs sets GOMAXPROCS, 0 leaves Go's default, and the
// GOMAXPROCS environment variable wins over both.
func TestApplyProcs(t *testing.T) {
	saved := setProcs
	defer func() { setProcs = saved }()
	for _, tc := range []struct {
		procs int
		env   string
		want  int // what is set; 0: nothing
	}{
		{1, "", 1},
		{4, "", 4},
		{0, "", 0},
		{1, "3", 0},
		{0, "2", 0},
		{1, "0", 1},    // the runtime ignores it: procs still counts
		{2, "many", 2}, // likewise
	} {
		got := 0
		setProcs = func(n int) int { got = n; return 0 }
		t.Setenv("GOMAXPROCS", tc.env)
		applyProcs(tc.procs, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if got != tc.want {
			t.Errorf("procs = %d, GOMAXPROCS=%q: set %d, want %d", tc.procs, tc.env, got, tc.want)
		}
	}
}

// TestServeProcs: the daemon runs Go code on as many threads as procs
// says (Go's own gauge, go_sched_gomaxprocs_threads, on /metrics), one by
// default, and GOMAXPROCS in its environment wins.
func TestServeProcs(t *testing.T) {
	t.Parallel()
	bin := buildSluice(t)
	for _, tc := range []struct {
		name, line, env string
		want            float64
	}{
		{"default", "", "GOMAXPROCS=", 1},
		{"procs-2", "procs = 2", "GOMAXPROCS=", 2},
		{"environment", "procs = 1", "GOMAXPROCS=3", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "sluice.toml")
			body := fmt.Sprintf("%s\nstate_dir = %q\n[anvil]\nenabled = false\n[policy]\nenabled = false\n[throttle]\nenabled = false\n[web]\nlisten = [\"unix:web\"]\n", tc.line, dir)
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			web := filepath.Join(dir, "web")
			p := startProc(t, bin, []string{"serve", "-c", cfg}, nil, tc.env)
			p.waitSockets(t, web)
			if got := scrape(t, web)["go_sched_gomaxprocs_threads"]; got != tc.want {
				t.Errorf("go_sched_gomaxprocs_threads = %v, want %v", got, tc.want)
			}
		})
	}
}
