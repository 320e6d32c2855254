package cli

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/app"
	"sluice/internal/config"
	"sluice/internal/testutil/logbuf"
)

// buildSluice builds the real binary (without the race detector: 200 of
// them start at once).
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, "sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	return bin
}

// fakeQmailRemote writes a stand-in for qmail-remote-real, the receiving
// end: a bash script that first appends its own wall-clock time
// ($EPOCHREALTIME: no fork of date(1) in between) and its host and
// recipient arguments to a log, then answers as qmail-remote does.
func fakeQmailRemote(t *testing.T, dir string) (string, string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash (Debian package bash, essential): %v", err)
	}
	log := filepath.Join(dir, "sends.log")
	script := filepath.Join(dir, "qmail-remote-real")
	body := "#!" + bash + "\necho \"$EPOCHREALTIME $1 $3\" >> " + log + "\nprintf 'r127.0.0.1 accepted message.\\0Kok\\0'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, log
}

// parseEpochRealtime reads bash's $EPOCHREALTIME, seconds.microseconds.
func parseEpochRealtime(v string) (time.Time, error) {
	sec, frac, ok := strings.Cut(v, ".")
	if !ok {
		sec, frac, ok = strings.Cut(v, ",") // a locale's decimal comma
	}
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || len(frac) != 6 || err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("bad EPOCHREALTIME %q", v)
	}
	return time.Unix(s, us*1000), nil
}

func startThrottleDaemon(t *testing.T, dir, policy string, logw *logbuf.Buffer) *app.Daemon {
	t.Helper()
	path := filepath.Join(dir, "sluice.toml")
	body := fmt.Sprintf("state_dir = %q\n[anvil]\nenabled = false\n[policy]\nenabled = false\n[throttle]\nlisten = [\"unix:throttle\"]\n%s", dir, policy)
	os.WriteFile(path, []byte(body), 0o644)
	cfg, errs := config.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var h slog.Handler = slog.DiscardHandler
	if logw != nil {
		h = slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	d, err := app.New(cfg, path, slog.New(h), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	return d
}

// TestThrottle200Processes: 200 concurrent `sluice throttle -qmail-remote`
// processes, 8 sends per second allowed to the relay, the default margin.
// The relay (a recording fake) never sees more than 8 sends in any second
// of its own clock, no send reaches it before its slot, slots are granted
// first come first served, and the waiting processes use almost no CPU.
// (8 per 10 s would take over four minutes; the window length is only a
// scale.)
func TestThrottle200Processes(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	t.Parallel() // mostly waiting for slots: it overlaps other waiting tests
	bin := buildSluice(t)
	dir := t.TempDir()
	var logw logbuf.Buffer
	startThrottleDaemon(t, dir, `
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "8/1s"
shared = true
`, &logw)
	fake, sendLog := fakeQmailRemote(t, dir)
	const n = 200
	type result struct {
		code     int
		out      string
		rebooked bool // woke too late for its slot and asked again
		cpu      time.Duration
	}
	results := make([]result, n)
	pids := make([]int, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		cmd := exec.Command(bin, "throttle", "-qmail-remote", "-s", filepath.Join(dir, "throttle"), "--",
			fake, fmt.Sprintf("mx%d.example.org", i%7), "sender@example.net", fmt.Sprintf("%d", i))
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids[i] = cmd.Process.Pid
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			r := result{out: out.String(), rebooked: strings.Contains(stderr.String(), "asking for a new slot")}
			if err != nil {
				r.code = -1
			}
			r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			results[i] = r
		}()
		// Arrival order is launch order: the next process starts once the
		// server has booked this one's slot (its grant line names its pid).
		booked := fmt.Sprintf(`sender="pid %d"`, pids[i])
		for j := 0; !strings.Contains(logw.String(), booked); j++ {
			if j > 10000 {
				t.Fatalf("process %d got no slot", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	wall := time.Since(start)
	var cpu time.Duration
	rebooked := 0
	for i, r := range results {
		if r.code != 0 || r.out != "r127.0.0.1 accepted message.\x00Kok\x00" {
			t.Fatalf("process %d: exit %d, output %q", i, r.code, r.out)
		}
		cpu += r.cpu
		if r.rebooked {
			rebooked++
		}
	}
	data, err := os.ReadFile(sendLog)
	if err != nil {
		t.Fatal(err)
	}
	// What the relay saw: its own clock when each send reached it.
	sends := make([]time.Time, n)
	seen := make([]bool, n)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("send log line %q", line)
		}
		at, err1 := parseEpochRealtime(f[0])
		idx, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || idx < 0 || idx >= n || seen[idx] {
			t.Fatalf("send log line %q: %v %v", line, err1, err2)
		}
		sends[idx], seen[idx] = at, true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("the relay never saw process %d", i)
		}
	}
	// The server's grants, paired with their senders by pid, in arrival
	// order (process i arrived i-th): first come, first served (a process
	// that woke too late and asked again got a later slot too, but its
	// first one was booked in turn), and no process sends before the slot
	// it sent in (its last).
	grants := senderGrants(t, logw.String())
	lateness := make([]time.Duration, n)
	for i := range n {
		g := grants[pids[i]]
		if results[i].rebooked && len(g) < 2 || !results[i].rebooked && len(g) != 1 {
			t.Fatalf("process %d has %d grants (asked again: %v)", i, len(g), results[i].rebooked)
		}
		if i > 0 && g[0].Before(grants[pids[i-1]][0]) {
			t.Fatalf("arrival %d got an earlier slot than arrival %d: not first come, first served", i, i-1)
		}
		used := g[len(g)-1]
		if sends[i].Before(used) {
			t.Fatalf("process %d reached the relay at %s, before its slot at %s", i, sends[i].Format(time.RFC3339Nano), used.Format(time.RFC3339Nano))
		}
		lateness[i] = sends[i].Sub(used)
	}
	slices.Sort(lateness)
	late := fmt.Sprintf("arrival after the slot: median %s, max %s; %d processes asked again", lateness[n/2].Round(time.Millisecond), lateness[n-1].Round(time.Millisecond), rebooked)
	// The limit as the relay counts it: never more than 8 sends in any
	// 1 s window of its own clock. The slots are 1.25 s apart (period +
	// the default margin), so a send may reach the relay up to 250 ms
	// after its slot.
	maxIn := maxInWindow(sends, time.Second)
	if maxIn > 8 {
		t.Fatalf("the relay saw %d sends within 1 s, limit 8 (%s)", maxIn, late)
	}
	// The senders really waited: 200 sends at 8 per second reach the
	// relay over at least 24 seconds of its clock.
	first, last := slices.MinFunc(sends, time.Time.Compare), slices.MaxFunc(sends, time.Time.Compare)
	if d := last.Sub(first); d < time.Duration(n/8-1)*time.Second {
		t.Fatalf("the relay saw 200 sends within %s: more than 8 per second", d)
	}
	// Waiting costs no CPU: a busy loop would burn about a core per
	// waiting process; sleeping ones spend only their start-up.
	budget := time.Duration(float64(wall) * 0.4 * 2)
	t.Logf("200 sends in %s, the relay saw at most %d in any 1 s (%s); waiting processes used %s CPU in all (%s each)", wall.Round(time.Millisecond), maxIn, late, cpu, cpu/n)
	if cpu > budget {
		t.Fatalf("waiting processes used %s CPU over %s wall: busy waiting?", cpu, wall)
	}
}

func runThrottle(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"throttle"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestThrottleDeferAndFailModes: qmail reports and exit statuses when the
// slot is too far away or the server is unreachable.
func TestThrottleDeferAndFailModes(t *testing.T) {
	bin := buildSluice(t)
	dir := t.TempDir()
	startThrottleDaemon(t, dir, `
[[throttle.policy]]
name = "relay"
match = ["relay.example"]
limit = "1/1h"
max_wait = "1m"
`, nil)
	fake, _ := fakeQmailRemote(t, dir)
	sock := filepath.Join(dir, "throttle")
	if code, out, _ := runThrottle(t, bin, "-qmail-remote", "-s", sock, "--", fake, "relay.example", "s@x", "r@y"); code != 0 || !strings.HasPrefix(out, "r") {
		t.Fatalf("first send: %d %q", code, out)
	}
	code, out, _ := runThrottle(t, bin, "-qmail-remote", "-s", sock, "--", fake, "Relay.Example", "s@x", "r@y")
	if code != 0 || !strings.HasPrefix(out, "Znext send slot for relay.example is in ") || !strings.HasSuffix(out, " (#4.3.0)\n\x00") {
		t.Fatalf("deferred qmail report: %d %q", code, out)
	}
	if code, _, errs := runThrottle(t, bin, "-s", sock, "-k", "relay.example", "--", "true"); code != 75 || !strings.Contains(errs, "deferred:") {
		t.Fatalf("plain defer: %d %q", code, errs)
	}
	// Other keys pass at once; the exit status passes through.
	if code, _, _ := runThrottle(t, bin, "-s", sock, "-k", "other.example", "--", "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("exit status %d, want 3", code)
	}
	// Unreachable server: fail-closed defers, fail-open sends.
	gone := filepath.Join(dir, "nothing-here")
	code, out, _ = runThrottle(t, bin, "-qmail-remote", "-s", gone, "--", fake, "relay.example", "s@x", "r@y")
	if code != 0 || !strings.HasPrefix(out, "Zthrottle server unavailable") {
		t.Fatalf("fail-closed: %d %q", code, out)
	}
	code, out, _ = runThrottle(t, bin, "-qmail-remote", "-fail-open", "-s", gone, "--", fake, "relay.example", "s@x", "r@y")
	if code != 0 || !strings.HasPrefix(out, "r127.0.0.1") {
		t.Fatalf("fail-open: %d %q", code, out)
	}
}

// TestThrottleDaemonStopsWhileWaiting: senders queued behind a busy slot
// answer per their fail mode when the daemon goes away.
func TestThrottleDaemonStopsWhileWaiting(t *testing.T) {
	bin := buildSluice(t)
	dir := t.TempDir()
	d := startThrottleDaemon(t, dir, `
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "100/1s"
concurrency = 1
`, nil)
	fake, _ := fakeQmailRemote(t, dir)
	sock := filepath.Join(dir, "throttle")
	holder := exec.Command(bin, "throttle", "-s", sock, "-k", "relay.example", "--", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	// The holder has its slot once it runs its command.
	waitFor(t, "the holder running its command", func() bool {
		// Any of its threads may have forked the command.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", holder.Process.Pid))
		for _, f := range tasks {
			if b, _ := os.ReadFile(f); len(strings.Fields(string(b))) > 0 {
				return true
			}
		}
		return false
	})
	type res struct {
		code int
		out  string
	}
	results := make(chan res, 3)
	for i := range 3 {
		go func() {
			args := []string{"-qmail-remote", "-s", sock, "--", fake, "relay.example", "s@x", "r@y"}
			if i == 2 {
				args = append([]string{"-fail-open"}, args...)
			}
			code, out, _ := runThrottle(t, bin, args...)
			results <- res{code, out}
		}()
	}
	waitFor(t, "three senders waiting behind the holder", func() bool {
		for _, door := range d.Status().Doors {
			if door.Name == "throttle" {
				return door.Conns == 4
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.Shutdown(ctx)
	var z, sent int
	for range 3 {
		r := <-results
		switch {
		case r.code == 0 && strings.HasPrefix(r.out, "Zthrottle server unavailable"):
			z++
		case r.code == 0 && strings.HasPrefix(r.out, "r127.0.0.1"):
			sent++
		default:
			t.Errorf("unexpected result %+v", r)
		}
	}
	if z != 2 || sent != 1 {
		t.Fatalf("deferred %d, sent %d; want 2 fail-closed deferrals and 1 fail-open send", z, sent)
	}
}

// grantTimes reads the "throttle grant" debug lines' at= times, in order.
func grantTimes(t *testing.T, log string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "throttle grant") {
			continue
		}
		i := strings.Index(line, " at=")
		if i < 0 {
			t.Fatalf("grant line without at=: %q", line)
		}
		v, _, _ := strings.Cut(line[i+4:], " ")
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			t.Fatalf("grant line %q: %v", line, err)
		}
		out = append(out, at)
	}
	return out
}

// senderGrants reads the throttle server's "slot granted" debug lines:
// each sender's slot times (by pid), in the order they were granted.
func senderGrants(t *testing.T, log string) map[int][]time.Time {
	t.Helper()
	out := map[int][]time.Time{}
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="throttle: slot granted"`) {
			continue
		}
		_, v, ok1 := strings.Cut(line, " at=")
		v, _, _ = strings.Cut(v, " ")
		_, p, ok2 := strings.Cut(line, ` sender="pid `)
		p, _, _ = strings.Cut(p, `"`)
		at, err1 := time.Parse(time.RFC3339Nano, v)
		pid, err2 := strconv.Atoi(p)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			t.Fatalf("grant line %q: %v %v", line, err1, err2)
		}
		out[pid] = append(out[pid], at)
	}
	return out
}

// maxInWindow returns the most times within any window of length w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	s := append([]time.Time(nil), ts...)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	m := 0
	for i := range s {
		j := sort.Search(len(s), func(k int) bool { return !s[k].Before(s[i].Add(w)) })
		m = max(m, j-i)
	}
	return m
}
