package cli

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestThrottleStalledSenderAsksAgain: a sender that wakes after its slot's
// latest time (here stopped with SIGSTOP, as a host stalled by load or
// swap stops it) would send late into the next senders' window; it gives
// the slot up and asks again, so the relay never sees two sends closer
// than the period. Limit 1 per 1 s with a 200 ms margin: A sends at once,
// B is booked 1.2 s later and stopped until 0.6 s after its slot, C is
// booked after B. The relay's own clock must never see two sends within
// 1 s (the limit; the margin is slack on top); before senders checked
// their slot's latest time, B sent 0.6 s late and C 0.6 s after it.
func TestThrottleStalledSenderAsksAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("three windows")
	}
	bin := buildSluice(t)
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, `[log]
level = "debug"
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "1/1s"
margin = "200ms"
max_wait = "30s"
`, "anvil", "policy", "milter")
	sock := filepath.Join(dir, "throttle")
	fake, sendLog := fakeQmailRemote(t, dir)
	d := relStart(t, bin, []string{"serve", "-c", cfg}, sock)
	grants := func() int { return strings.Count(d.stderr.String(), "throttle grant") }
	start := func(name string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(bin, "throttle", "-qmail-remote", "-s", sock, "--", fake, "relay.example", "s@example.org", name+"@example.net")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	a, aOut := start("a")
	waitUntil(t, "A's grant", func() bool { return grants() == 1 }, d.stderr.String)
	b, bOut := start("b")
	waitUntil(t, "B's grant", func() bool { return grants() == 2 }, d.stderr.String)
	if err := b.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c, cOut := start("c")
	waitUntil(t, "C's grant", func() bool { return grants() == 3 }, d.stderr.String)
	bSlot := grantTimes(t, d.stderr.String())[1]
	time.Sleep(time.Until(bSlot.Add(600 * time.Millisecond)))
	if err := b.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name string
		cmd  *exec.Cmd
		out  *bytes.Buffer
	}{{"a", a, aOut}, {"b", b, bOut}, {"c", c, cOut}} {
		if err := w.cmd.Wait(); err != nil || !strings.Contains(w.out.String(), "Kok") {
			t.Errorf("sender %s: %v %q", w.name, err, w.out.String())
		}
	}
	if !strings.Contains(bOut.String(), "after the send slot's latest time; asking for a new slot") {
		t.Errorf("B did not ask again: %q", bOut.String())
	}
	sends := relaySends(t, sendLog)
	slices.SortFunc(sends, func(x, y time.Time) int { return x.Compare(y) })
	if len(sends) != 3 {
		t.Fatalf("the relay saw %d sends, want 3", len(sends))
	}
	if m := maxInWindow(sends, time.Second); m > 1 {
		t.Errorf("the relay saw %d sends within 1 s: %v (B's slot was %v)", m, sends, bSlot)
	}
}
