package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
)

// qmailReports are qmail-remote's reports as a stand-in prints them.
const (
	qmailDelivered = "r\x00K127.0.0.1 accepted message.\nRemote host said: 250 ok\n\x00"
	qmailBanned    = "DConnected to 127.0.0.1 but sender was rejected.\nRemote host said: 554 5.7.1 too many messages\n\x00"
)

// qmailRemoteSays writes a qmail-remote stand-in into dir that prints
// report, as a forger's would, and returns its path.
func qmailRemoteSays(t *testing.T, dir, name, report string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\nprintf '%s'\n", strings.NewReplacer("\x00", `\000`, "\n", `\n`).Replace(report))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestThrottleForgedReports: a local user outside the wrapper's group who
// can reach the throttle socket (an administrator left it at 0666) runs
// the wrapper around a command printing a relay's ban, five times: each
// forger's own report is made temporary, but no key is suspended, no
// learned limit moves, and the log names the peer whose reports changed
// nothing. The wrapper's user (qmailr in group qmail, as qmail runs it):
// one send's ban suspends nothing; a second corroborates it, and the
// shared key is suspended with its limit halved. `sluice throttle show`
// and the status agree on the learned limit; `sluice throttle reset`
// restores the configured one.
func TestThrottleForgedReports(t *testing.T) {
	peer.Root(t, "the forger and the wrapper run as other users")
	nobody, qmailr := credential(t, "nobody"), asQmailr(t)
	dir := deployDir(t)
	bin := filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	delivered := qmailRemoteSays(t, dir, "delivered", qmailDelivered)
	banned := qmailRemoteSays(t, dir, "banned", qmailBanned)
	var logw logbuf.Buffer
	d := startThrottleDaemon(t, dir, `
[throttle.socket]
group = "qmail"
mode = "0666"
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "100/1s"
shared = true
ban_signs = ["too many"]
cool_off = "1h"
adapt = true
`, &logw)
	sock, ctl := filepath.Join(dir, "throttle"), filepath.Join(dir, "control")
	wrap := func(cred *syscall.SysProcAttr, standin string) string {
		t.Helper()
		cmd := exec.Command(bin, "throttle", "-qmail-remote", "-s", sock, "--", standin, "relay.example", "list@example.org", "r@example.net")
		cmd.SysProcAttr = cred
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the wrapper: %v %q\n%s", err, out, stderrOf(err))
		}
		return string(out)
	}
	if out := wrap(qmailr, delivered); !strings.HasPrefix(out, "r") {
		t.Fatalf("a delivery as qmailr: %q", out)
	}
	for i := range 5 {
		if out := wrap(nobody, banned); !strings.HasPrefix(out, "Z") {
			t.Errorf("forged report %d: %q, want its own failure made temporary (Z)", i+1, out)
		}
	}
	if ks := d.Status().ThrottleKeys; len(ks) != 0 {
		t.Fatalf("after five forged reports: throttle keys %+v, want none", ks)
	}
	nobodyUID := strconv.Itoa(int(nobody.Credential.Uid))
	if !strings.Contains(logw.String(), "a report from a peer not trusted to steer the key changed nothing") ||
		!strings.Contains(logw.String(), "peer=\"uid "+nobodyUID+" ") ||
		!strings.Contains(logw.String(), "door=throttle verdict=refused reason=untrusted_report") {
		t.Errorf("no log line names the untrusted peer (uid %s):\n%s", nobodyUID, tail(logw.String(), 20))
	}
	if out := wrap(qmailr, banned); !strings.HasPrefix(out, "Z") {
		t.Errorf("the wrapper's first ban: %q, want Z", out)
	}
	if ks := d.Status().ThrottleKeys; len(ks) != 0 {
		t.Fatalf("after one send's ban: throttle keys %+v, want none (not corroborated)", ks)
	}
	if out := wrap(qmailr, banned); !strings.HasPrefix(out, "Z") {
		t.Errorf("the wrapper's second ban: %q, want Z", out)
	}
	ks := d.Status().ThrottleKeys
	if len(ks) != 1 || ks[0].Key != "relay *" || !ks[0].SuspendedUntil.After(time.Now()) || ks[0].Limit != 50 || ks[0].Configured != 100 || ks[0].Period != "1s" {
		t.Fatalf("after two sends' bans: throttle keys %+v, want relay * suspended at a learned 50 of 100 per 1s", ks)
	}
	code, out, _ := runControl(t, bin, "throttle", "show", "-s", ctl)
	if code != 0 || !strings.Contains(out, "relay * [50/1s exact, learned; configured 100/1s exact]") || !strings.Contains(out, "SUSPENDED") {
		t.Fatalf("throttle show: %d %q, want the shared key at its learned limit, suspended", code, out)
	}
	code, out, _ = runControl(t, bin, "throttle", "reset", "-s", ctl, "relay.example")
	if code != 0 || !strings.Contains(out, "throttle relay *: limit back to 100/1s exact (was 50), ban streak 1 forgotten") {
		t.Fatalf("throttle reset: %d %q", code, out)
	}
	code, out, _ = runControl(t, bin, "throttle", "show", "-s", ctl)
	if code != 0 || !strings.Contains(out, "relay * [100/1s exact]") {
		t.Errorf("throttle show after the reset: %d %q, want the configured limit", code, out)
	}
	if ks := d.Status().ThrottleKeys; len(ks) != 1 || ks[0].Limit != 0 || ks[0].Bans != 0 || ks[0].SuspendedUntil.IsZero() {
		t.Errorf("the status after the reset: %+v, want the suspension alone", ks)
	}
}
