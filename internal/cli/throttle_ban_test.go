package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/status"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/throttle/bantest"
)

// banScenario is the qmail article's scenario at a smaller scale of time
// and list (bench/ban.sh plays it with 500 messages): a relay that bans
// for banT with a permanent 554 after more than banX sends in any banY,
// 250 messages queued at once (and one to an unknown user), delivered by
// qmail-send's 10 concurrent qmail-remotes, each the deployed wrapper
// (sluice throttle -qmail-remote, as qmailr) around a qmail-remote that
// speaks SMTP to the relay.
const (
	banX, banY, banT = 60, 2 * time.Second, 3 * time.Second
	banMessages      = 250
	banUnknown       = "nobody@example.net"
)

type banRun struct {
	queue bantest.QueueResult
	relay bantest.RelayStats
	log   string
}

// runBanScenario plays the scenario with policy, the throttle policy in
// sluice.toml.
func runBanScenario(t *testing.T, bin, standin, policy string) banRun {
	t.Helper()
	relay, err := bantest.StartRelay(bantest.RelayOptions{X: banX, Y: banY, T: banT, Unknown: map[string]bool{banUnknown: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	dir := deployDir(t)
	var cred *syscall.SysProcAttr
	if os.Geteuid() == 0 {
		// As deployed: qmail-rspawn runs the wrapper as qmailr with
		// group qmail alone, which may use the socket through that group.
		cred = asQmailr(t)
		policy = "[throttle.socket]\ngroup = \"qmail\"\nmode = \"0660\"\n" + policy
	}
	var logw logbuf.Buffer
	startThrottleDaemon(t, dir, policy, &logw)
	sock := filepath.Join(dir, "throttle")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := bantest.RunQueue(ctx, bantest.QueueOptions{
		Messages: banMessages + 1, Concurrency: 10, RetryUnit: 700 * time.Millisecond,
		Deliver: func(ctx context.Context, i int) (int, []byte) {
			rcpt := fmt.Sprintf("subscriber%d@example.net", i)
			if i == banMessages {
				rcpt = banUnknown
			}
			cmd := exec.CommandContext(ctx, bin, "throttle", "-qmail-remote", "-s", sock, "--", standin, "example.net", "list@example.org", rcpt)
			cmd.Env = append(os.Environ(), bantest.RelayEnv+"="+relay.Addr())
			cmd.SysProcAttr = cred
			return bantest.Run(cmd, "Subject: list mail\n\nhello\n")
		},
	})
	if ctx.Err() != nil {
		t.Fatalf("the queue did not empty in a minute: %+v", res)
	}
	return banRun{queue: res, relay: relay.Stats(), log: logw.String()}
}

// buildBanBinaries builds sluice and bantest's qmail-remote where qmailr
// may run them.
func buildBanBinaries(t *testing.T) (string, string) {
	t.Helper()
	dir := deployDir(t)
	var bins []string
	for _, pkg := range []string{"sluice/cmd/sluice", "sluice/internal/throttle/bantest/qmail-remote"} {
		bin := filepath.Join(dir, filepath.Base(pkg))
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
		bins = append(bins, bin)
	}
	return bins[0], bins[1]
}

// TestThrottleBanScenario: with adapt and a limit about four times the
// relay's (which sluice is not told; each ban halves it at most), no
// permanent failure reaches qmail, every message is delivered once, the
// relay bans at most twice; the
// unknown user's message still bounces. Without protection the same run
// bounces most of the list.
func TestThrottleBanScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("two runs of 250 deliveries")
	}
	t.Parallel() // mostly waiting for slots: it overlaps other waiting tests
	if os.Geteuid() == 0 {
		asQmailr(t)
	}
	bin, standin := buildBanBinaries(t)

	adapt := runBanScenario(t, bin, standin, `
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "120/1s"
shared = true
ban_signs = ["too many"]
ban_after = 5
cool_off = "4s"
adapt = true
`)
	q, r := adapt.queue, adapt.relay
	t.Logf("adapt, unknown limit: delivered %d, bounced %d (%q), deferrals %d, relay bans %d, refused %d, most in %s %d, took %s",
		q.Delivered, q.Bounced, q.Bounces, q.Deferrals, r.Bans, r.Refused, banY, r.MaxInY, q.Took.Round(time.Millisecond))
	if q.Delivered != banMessages || q.Bounced != 1 || !strings.Contains(q.Bounces[0], "user unknown") {
		t.Errorf("delivered %d of %d, bounced %d (want only the unknown user's): %q\n%s", q.Delivered, banMessages, q.Bounced, q.Bounces, tail(adapt.log, 30))
	}
	if r.Bans > 2 {
		t.Errorf("the relay banned %d times, want at most 2", r.Bans)
	}
	for i := range banMessages {
		if n := r.Recipient[fmt.Sprintf("subscriber%d@example.net", i)]; n != 1 {
			t.Errorf("subscriber%d got the message %d times", i, n)
		}
	}
	if !strings.Contains(adapt.log, "throttle: relay ban; key suspended") || !strings.Contains(adapt.log, "throttle: limit lowered") {
		t.Errorf("no ban or no lowered limit logged:\n%s", tail(adapt.log, 30))
	}

	none := runBanScenario(t, bin, standin, `
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "400/1s"
shared = true
`)
	q, r = none.queue, none.relay
	t.Logf("no protection: delivered %d, bounced %d, relay bans %d, took %s", q.Delivered, q.Bounced, r.Bans, q.Took.Round(time.Millisecond))
	if q.Bounced < banMessages/5 {
		t.Errorf("without protection only %d bounces: the scenario does not show the article's problem", q.Bounced)
	}
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(len(l)-n, 0):], "\n")
}

// TestThrottleCommandBan: for a command other than qmail-remote, the exit
// status and the end of stderr are the result: a failure whose text
// matches a ban sign exits 75 (try again later) and suspends the key, so
// the next sender defers without running its command; a failure that
// matches no sign keeps its status. With -qmail-remote and the key
// suspended, qmail gets a Z report.
func TestThrottleCommandBan(t *testing.T) {
	bin := buildSluice(t)
	dir := t.TempDir()
	startThrottleDaemon(t, dir, `
[[throttle.policy]]
name = "relays"
match = ["*"]
limit = "100/1s"
ban_signs = ["rate limit"]
cool_off = "1h"
`, nil)
	sock := filepath.Join(dir, "throttle")
	fail := func(text string) []string {
		return []string{"sh", "-c", "echo '" + text + "' >&2; exit 1"}
	}
	code, _, stderr := runThrottle(t, bin, append([]string{"-s", sock, "-k", "other.example", "--"}, fail("550 5.1.1 bad address")...)...)
	if code != 1 {
		t.Errorf("a failure matching no sign: exit %d, want 1 (%s)", code, stderr)
	}
	// Two sends' failures matching a sign: the first is its own
	// deferral and suspends nothing (corroborate = 2, the default); the
	// second corroborates it.
	for i := range 2 {
		code, _, stderr = runThrottle(t, bin, append([]string{"-s", sock, "-k", "relay.example", "--"}, fail("550 rate limit exceeded")...)...)
		if code != exTempFail || !strings.Contains(stderr, "550 rate limit exceeded") || !strings.Contains(stderr, "ban") {
			t.Errorf("failure %d matching a sign: exit %d, want %d\n%s", i+1, code, exTempFail, stderr)
		}
	}
	marker := filepath.Join(dir, "ran")
	code, _, stderr = runThrottle(t, bin, "-s", sock, "-k", "relay.example", "--", "touch", marker)
	if code != exTempFail || !strings.Contains(stderr, "suspended until") {
		t.Errorf("a sender while the key is suspended: exit %d, want %d\n%s", code, exTempFail, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran while its key was suspended")
	}
	code, out, _ := runThrottle(t, bin, "-qmail-remote", "-s", sock, "--", "true", "relay.example", "s@example.org", "r@example.net")
	if code != 0 || !strings.HasPrefix(out, "Z") || !strings.Contains(out, "suspended until") || !strings.HasSuffix(out, "\x00") {
		t.Errorf("qmail-remote while the key is suspended: exit %d, report %q", code, out)
	}
	code, _, _ = runThrottle(t, bin, "-s", sock, "-k", "other.example", "--", "true")
	if code != 0 {
		t.Errorf("another key: exit %d, want 0 (only the banned key is suspended)", code)
	}
}

// TestStatusShowsThrottleKeys: `sluice status` shows a suspended key with
// its learned limit, and a key back to normal sending at a learned one.
func TestStatusShowsThrottleKeys(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	writeStatus(&b, &status.Status{Now: now, ThrottleKeys: []status.ThrottleKey{
		{Key: "smarthost *", SuspendedUntil: now.Add(90 * time.Second), Bans: 2, Limit: 15, Configured: 100, Period: "1m1s"},
		{Key: "each mx.example", Limit: 3, Configured: 8, Period: "10.25s"},
	}})
	out := b.String()
	for _, want := range [][]string{
		{"smarthost *", "suspended until 2026-11-26T12:01:30Z (1m30s)", " 2 ", "15/1m1s learned, 100 configured"},
		{"each mx.example", "normal", " 0 ", "3/10.25s learned, 8 configured"},
	} {
		found := false
		for line := range strings.Lines(out) {
			at := 0
			for _, part := range want {
				i := strings.Index(line[at:], part)
				if i < 0 {
					at = -1
					break
				}
				at += i + len(part)
			}
			found = found || at >= 0
		}
		if !found {
			t.Errorf("sluice status has no line with %q in turn:\n%s", want, out)
		}
	}
}
