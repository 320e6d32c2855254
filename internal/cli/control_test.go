package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/recipe"
	"sluice/internal/testutil/redistest"
)

// runControl runs one control command of bin and returns its exit status,
// output and pid.
func runControl(t *testing.T, bin string, args ...string) (int, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Logf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return code, out.String(), cmd.Process.Pid
}

// wantLogLine checks that log has exactly one line of the command naming
// uid 0 and pid, and that it says what changed.
func wantLogLine(t *testing.T, log, command string, pid int, changed string) {
	t.Helper()
	var lines []string
	for l := range strings.SplitSeq(log, "\n") {
		if strings.Contains(l, `msg="control: `+command+`"`) && strings.Contains(l, "pid="+strconv.Itoa(pid)+" ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "uid=0 ") || !strings.Contains(lines[0], changed) {
		t.Errorf("log lines of %s by pid %d: %q; want one naming uid=0 and %q", command, pid, lines, changed)
	}
}

// TestControlPostfixRedis is issue 28's test with a real Postfix (the
// policy recipe of docs/policy.md, examples/policy-sender-rate.toml) and
// two daemons started by root as the user sluice, sharing one
// redis-server; Postfix asks daemon A, every command goes to daemon B's
// control socket. A sender at 10/10 gets 450; `sluice key reset` on B and
// the next message is accepted through A; `sluice exempt add -raise 5`
// on B lets exactly 5 more through A, and the exemption ends on time (3 s
// here instead of the minute: real daemons cannot use the fake
// clock); each command leaves one log line on B naming the peer.
func TestControlPostfixRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postfix, Redis and two daemons")
	}
	peer.Root(t, "the daemons are started by root and switch to the user sluice")
	peer.User(t, "sluice")
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	base := deployDir(t)
	srv, err := redistest.Start(t.TempDir(), 0)
	if err == redistest.ErrNoRedis {
		peer.Missing(t, "redis-server", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	bin, _ := muxBinaries(t)
	portA, err1 := postfixtest.FreePort()
	portB, err2 := postfixtest.FreePort()
	smtpPort, err3 := postfixtest.FreePort()
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	addrA := "127.0.0.1:" + strconv.Itoa(portA)
	mainCF := recipe.MainCF(t, recipe.Replace(t, recipe.Get(t, "docs/policy.md", "policy-main.cf"), "127.0.0.1:10040", addrA))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{Dir: filepath.Join(base, "postfix"), SMTPPort: smtpPort, MainCF: mainCF, Logf: t.Logf})
	_ = inst
	example := policyExample(t)
	store := fmt.Sprintf("[store]\nkind = \"redis\"\n[store.redis]\naddrs = [%q]\nkey_prefix = \"ctl:\"\n", srv.Addr())
	ctlA, ctlB := filepath.Join(base, "a", "run", "control"), filepath.Join(base, "b", "run", "control")
	startAsSluice(t, bin, base, "a", recipe.Replace(t, example, "127.0.0.1:10040", addrA)+store, portA, ctlA)
	b := startAsSluice(t, bin, base, "b", recipe.Replace(t, example, "127.0.0.1:10040", "127.0.0.1:"+strconv.Itoa(portB))+store, portB, ctlB)
	assertSocket(t, ctlB, "sluice", "sluice", 0o660)

	c, greeting, err := postfixtest.DialSMTP(ctx, smtpPort)
	if err != nil || greeting.Code != 220 {
		t.Fatalf("greeting %v %v", greeting, err)
	}
	defer c.Close()
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO: %v %v", r, err)
	}
	const sender = "customer@example.org"
	n := 0
	send := func() error {
		n++
		err := c.SendMessage(sender, fmt.Sprintf("rcpt%d@example.net", n))
		if err != nil {
			if r, rerr := c.Cmd("RSET"); rerr != nil || r.Code != 250 {
				t.Fatalf("RSET %v %v", r, rerr)
			}
		}
		return err
	}
	sendN := func(what string, want int) {
		t.Helper()
		for i := range want {
			if err := send(); err != nil {
				t.Fatalf("%s: message %d of %d refused: %v", what, i+1, want, err)
			}
		}
		if err := send(); err == nil || !strings.Contains(err.Error(), "450 4.7.1") || !strings.Contains(err.Error(), "Too much mail from sender="+sender) {
			t.Fatalf("%s: the message after %d: %v; want the policy's 450 4.7.1", what, want, err)
		}
	}
	sendN("at first", 10)

	// The key as B sees it, then its reset.
	code, out, _ := runControl(t, bin, "key", "show", "-json", "-s", ctlB, "-rule", "sender-rate", "-key", "sender="+sender)
	var shown struct {
		Limits []struct{ Count, Remaining int64 }
	}
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || len(shown.Limits) != 1 || shown.Limits[0].Count != 10 || shown.Limits[0].Remaining != 0 {
		t.Fatalf("key show on B: %d %s", code, out)
	}
	code, out, pid := runControl(t, bin, "key", "reset", "-s", ctlB, "-rule", "sender-rate", "-key", "sender="+sender)
	if code != 0 || !strings.Contains(out, "reset 1 key(s)") {
		t.Fatalf("key reset on B: %d %q", code, out)
	}
	wantLogLine(t, b.stderr.String(), "key.reset", pid, "sender="+sender)
	sendN("after the reset", 10)

	// An exemption raising the limit by 5 for 3 s, set on B, used on A.
	// The daemon sets the end at its own now plus 3 s, some time after
	// this one: no earlier than until.
	until := time.Now().Add(3 * time.Second)
	code, _, pid = runControl(t, bin, "exempt", "add", "-s", ctlB, "-rule", "sender-rate", "-key", "sender="+sender, "-raise", "5", "-for", "3s")
	if code != 0 {
		t.Fatal("exempt add failed")
	}
	wantLogLine(t, b.stderr.String(), "exempt.add", pid, "limits raised by 5")
	waitExemptions(t, bin, ctlA, 1) // A reads the shared exemptions every second
	for i := range 4 {
		if err := send(); err != nil {
			t.Fatalf("under the exemption: message %d of 5 refused: %v", i+1, err)
		}
	}
	gone := waitExemptions(t, bin, ctlA, 0)
	if gone.Before(until) || gone.After(until.Add(3*time.Second)) {
		t.Errorf("the exemption ended on A at %s; it was set until %s", gone.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
	}
	if err := send(); err == nil || !strings.Contains(err.Error(), "450 4.7.1") {
		t.Fatalf("after the exemption ended (4 of its 5 used): %v; want 450", err)
	}
	_, _ = c.Cmd("QUIT")
}

// waitExemptions waits until the daemon at ctl lists n exemptions and
// returns when it first did.
func waitExemptions(t *testing.T, bin, ctl string, n int) time.Time {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, _ := runControl(t, bin, "exempt", "list", "-json", "-s", ctl)
		var list struct{ Exemptions []json.RawMessage }
		if code == 0 && json.Unmarshal([]byte(out), &list) == nil && len(list.Exemptions) == n {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listed %d exemptions: %s", ctl, n, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestThrottleSuspendResume: a throttle key suspended by `sluice throttle
// suspend` (for 30 s) makes 10 concurrent qmail-remote wrappers defer at
// once with qmail's report Z, sending nothing; after `sluice throttle
// resume` 10 wrappers send. Each command leaves one log line naming its
// pid.
func TestThrottleSuspendResume(t *testing.T) {
	bin := buildSluice(t)
	dir := t.TempDir()
	var logs logbuf.Buffer
	startThrottleDaemon(t, dir, `
[[throttle.policy]]
name = "relay"
match = ["relay.example"]
limit = "100/1s"
max_wait = "1m"
`, &logs)
	fake, sends := fakeQmailRemote(t, dir)
	sock, ctl := filepath.Join(dir, "throttle"), filepath.Join(dir, "control")
	code, out, pid := runControl(t, bin, "throttle", "suspend", "-s", ctl, "-for", "30s", "relay.example")
	if code != 0 || !strings.Contains(out, "relay relay.example: suspended until") {
		t.Fatalf("suspend: %d %q", code, out)
	}
	wantLogLine(t, logs.String(), "throttle.suspend", pid, "suspended until")
	wrappers := func() []string {
		outs := make([]string, 10)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Go(func() {
				_, outs[i], _ = runThrottle(t, bin, "-qmail-remote", "-s", sock, "--", fake, "relay.example", "s@x", fmt.Sprintf("r%d@y", i))
			})
		}
		wg.Wait()
		return outs
	}
	for i, o := range wrappers() {
		if !strings.HasPrefix(o, "Zrelay relay.example is suspended until ") || !strings.Contains(o, "suspended by an administrator") {
			t.Errorf("wrapper %d while suspended: %q; want a Z report", i, o)
		}
	}
	if b, _ := os.ReadFile(sends); len(b) != 0 {
		t.Fatalf("sends during the suspension:\n%s", b)
	}
	code, out, _ = runControl(t, bin, "throttle", "show", "-s", ctl, "relay.example")
	if code != 0 || !strings.Contains(out, "SUSPENDED") {
		t.Fatalf("show: %d %q", code, out)
	}
	code, _, pid = runControl(t, bin, "throttle", "resume", "-s", ctl, "relay.example")
	if code != 0 {
		t.Fatal("resume failed")
	}
	wantLogLine(t, logs.String(), "throttle.resume", pid, "resumed")
	for i, o := range wrappers() {
		if !strings.HasPrefix(o, "r127.0.0.1 accepted") {
			t.Errorf("wrapper %d after the resume: %q; want the relay's acceptance", i, o)
		}
	}
	if b, _ := os.ReadFile(sends); strings.Count(string(b), "\n") != 10 {
		t.Fatalf("sends after the resume:\n%s", b)
	}
}

// TestCheckExplain: `sluice check -c FILE` with a request explains it
// against the file's rules, rule by rule, counting nothing: from
// ATTR=VALUE operands or a Postfix policy request on stdin; a bad
// operand is a usage error.
func TestCheckExplain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	body := fmt.Sprintf(`state_dir = %q
[[policy.rule]]
name = "partners"
count = "messages"
sender_domain = ["partner.example"]
key = ["sender"]
limit = ["100/1h exact"]
[[policy.rule]]
name = "everyone"
count = "messages"
stage = "RCPT"
key = ["client_address/24/64"]
limit = ["10/1m exact"]
`, dir)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // nothing is counted: the second run says the same
		code, out, errs := run("check", "-c", path, "sender=a@other.example", "client_address=192.0.2.9", "protocol_state=RCPT")
		want := "answer: DUNNO\n1. partners: no match\n2. everyone [client_address=192.0.2.0/24]: ok (this request adds 1)\n    10/60s exact       count 0, remaining 10\n"
		if code != 0 || out != want {
			t.Fatalf("check with a request: exit %d, %q (%s); want %q", code, out, errs, want)
		}
	}
	stdin = strings.NewReader("request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nsender=b@partner.example\nclient_address=192.0.2.9\n\n")
	defer func() { stdin = os.Stdin }()
	code, out, _ := run("check", "-c", path, "-json", "-")
	var ex struct {
		Answer string
		Rules  []struct{ Rule, Outcome string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &ex) != nil || ex.Answer != "DUNNO" || len(ex.Rules) != 2 || ex.Rules[0].Outcome != "ok" || ex.Rules[1].Outcome != "not counted at END-OF-MESSAGE" {
		t.Fatalf("check with a request on stdin: %d %s", code, out)
	}
	if code, _, errs := run("check", "-c", path, "nonsense=1"); code != 2 || !strings.Contains(errs, "not ATTRIBUTE=VALUE") {
		t.Fatalf("a bad operand: exit %d, %q", code, errs)
	}
}

// TestControlNamesMissingFlag: key show, key reset, exempt add and
// exempt del without -rule or -key say which flag is missing, before
// they reach for a daemon.
func TestControlNamesMissingFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"key", "reset", "-key", "sender=a@b"}, "sluice key reset: missing -rule RULE"},
		{[]string{"key", "show", "-rule", "r"}, "sluice key show: missing -key KEY"},
		{[]string{"exempt", "add", "-key", "sender=a@b"}, "sluice exempt add: missing -rule RULE"},
		{[]string{"exempt", "del", "-rule", "r"}, "sluice exempt del: missing -key KEY"},
	} {
		code, _, errs := run(append(tc.args, "-s", "/nonexistent/control")...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
