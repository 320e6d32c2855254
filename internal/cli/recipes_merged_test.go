package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/anvil/anviltest"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/recipe"
)

// TestRecipesMergedIntoExample runs the production configuration,
// examples/sluice.toml, with the recipes of docs/anvil.md, docs/milter.md
// and docs/mux.md's `mux-unpriv-web` and the rule of docs/policy.md's
// example added as files of its include_dir, as docs/operations.md tells
// an administrator to, under the shipped units (unitHost: the unit files
// moved to the test's directory, their sockets made and passed as
// systemd does, ExecStartPre='s check, then ExecStart= as sluice), with
// one private Postfix whose smtpd uses sluice as its anvil, its milter
// (unix sockets, as the milter recipe's comment has it) and its policy
// service, and Debian's multiplexor run as defang with docs/mux.md's -a
// line (startDebianMux). Only paths and addresses move; a last file, the
// test's own, caps the class local at 2 sessions and 5 connections a
// minute; examples/policy-sender-rate.toml's rule is one more file.
// Before the start, check rejects the merged configuration for the
// shipped units until the milter's socket unit is given (its directory is
// root's and read-only under ProtectSystem=strict). Then, measured at the
// SMTP client: the 11th message of a sender is deferred, exactly 2
// sessions are admitted, the 3rd gets 421; once one ends a new one gets
// in, and the 6th connection of the minute is refused by the anvil's
// rate. Then `sluice status` as sluice, through the web socket the unit
// passes, shows the multiplexor's pool read at its unprivileged socket.
// Last, with the milter's recipe taken out and its socket unit still
// installed, ExecStartPre='s check and the start refuse alike
// (milterRecipeRemoved).
func TestRecipesMergedIntoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postfix, the multiplexor and a daemon")
	}
	peer.Root(t, "the units' sockets are made by root; the multiplexor runs as defang")
	peer.User(t, "sluice")
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	_, unpriv := startDebianMux(t, base)
	smtpPort, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	queue := filepath.Join(base, "postfix", "queue")
	mainCF := recipe.MainCF(t, recipe.Replace(t, recipe.Get(t, "docs/milter.md", "milter-main.cf"), "inet:127.0.0.1:8891", "unix:"+queue+"/sluice/milter"))
	for k, v := range recipe.MainCF(t, recipe.Replace(t, recipe.Get(t, "docs/policy.md", "policy-main.cf"), "inet:127.0.0.1:10040", "unix:private/sluice-policy")) {
		mainCF[k] = v
	}
	mainCF["smtpd_client_event_limit_exceptions"] = ""
	mainCF["smtpd_client_connection_rate_limit"] = "100"
	mainCF["smtpd_client_auth_rate_limit"] = "7" // a drift the start must report
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{Dir: filepath.Join(base, "postfix"), SMTPPort: smtpPort, MainCF: mainCF, Logf: t.Logf})
	if inst.QueueDir() != queue {
		t.Fatalf("queue %s, want %s", inst.QueueDir(), queue)
	}

	moved := movedDeploymentAt(t, bin, base, queue, "sluice", "sluice")
	cfg, units := filepath.Join(base, "sluice.toml"), filepath.Join(base, "systemd")
	writeMergedConfig(t, moved, strings.NewReplacer("/etc/postfix", inst.ConfigDir()), base, unpriv)
	args := []string{"check", "-q", "-c", cfg, "-service-unit", filepath.Join(units, "sluice.service"),
		"-socket-unit", filepath.Join(units, "sluice.socket"), "-socket-unit", filepath.Join(units, "sluice-web.socket")}
	if code, _, errs := run(args...); code != 1 || !strings.Contains(errs, "20-milter.toml") ||
		!strings.Contains(errs, "user sluice cannot bind "+queue+"/sluice/milter") {
		t.Errorf("check without the milter's socket unit: exit %d, %s", code, errs)
	}
	args = append(args, "-socket-unit", filepath.Join(units, "sluice-milter.socket"))
	if code, _, errs := run(args...); code != 0 {
		t.Errorf("check with the milter's socket unit: exit %d, %s", code, errs)
	}
	// Without -q check shows what it merged and who enforces the caps.
	code, out, _ := run(append([]string{"check"}, args[2:]...)...)
	for _, want := range []string{"conf.d/10-anvil.toml, " + base + "/conf.d/20-milter.toml, " + base + "/conf.d/30-mux-web.toml, " +
		base + "/conf.d/50-sender-rate.toml, " + base + "/conf.d/90-test.toml",
		"refuse caps enforced by: anvil (at connect) and the milter (at CONNECT); a Postfix session both see holds one slot",
		"worker pool: asks the multiplexor at " + unpriv} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("check: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}

	// systemctl enable --now of the socket units, then of sluice.
	h := newUnitHost(t, moved, units)
	p := h.start()
	assertUnprivileged(t, p.pid(), "sluice")

	mergedSessions(t, ctx, inst, smtpPort, p)

	// The page's data, as sluice reads it through the web socket: the
	// pool, read at the multiplexor's unprivileged socket.
	if st := statusAs(t, bin, cfg, credential(t, "sluice"), p); !strings.Contains(st, "pool     0/2 busy  [") {
		t.Errorf("sluice status shows no pool of the multiplexor at %s:\n%s\ndaemon:\n%s", unpriv, st, p.stderr.String())
	}
	if out, err := h.reload(); err != nil {
		t.Errorf("ExecReload of the merged configuration ExecStartPre accepted: %v\n%s", err, out)
	}
	h.stop()
	milterRecipeRemoved(t, h, base)
}

// milterRecipeRemoved is the other configuration of issue 32 that check
// passed and the unit could not start: the milter's recipe taken out of
// conf.d while its socket unit still passes the socket. ExecStartPre='s
// check names the socket the start would refuse, and ExecStart= refuses
// it alike.
func milterRecipeRemoved(t *testing.T, h *unitHost, base string) {
	t.Helper()
	if err := os.Remove(filepath.Join(base, "conf.d", "20-milter.toml")); err != nil {
		t.Fatal(err)
	}
	out, err := h.preStart()
	if err == nil || !strings.Contains(string(out), "sluice-milter.socket:") || !strings.Contains(string(out), "would refuse the socket") {
		t.Errorf("ExecStartPre without the milter's recipe: %v\n%s", err, out)
	}
	p := h.startMain()
	if err := p.wait(t, 30*time.Second); err == nil || !strings.Contains(p.stderr.String(), "no listen address in the configuration names") {
		t.Errorf("ExecStart without the milter's recipe: %v\n%s", err, p.stderr.String())
	}
}

// writeMergedConfig writes TestRecipesMergedIntoExample's configuration
// under base: examples/sluice.toml as sluice.toml with include_dir, the
// recipes as files of conf.d, and the units the check names, all moved
// by moved and then by postfix (the Postfix's configuration directory);
// docs/mux.md's web recipe names the multiplexor's socket unpriv.
func writeMergedConfig(t *testing.T, moved, postfix *strings.Replacer, base, unpriv string) {
	t.Helper()
	move := func(s string) string { return postfix.Replace(moved.Replace(s)) }
	example, err := os.ReadFile(filepath.Join(recipe.Root(), "examples", "sluice.toml"))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := os.ReadFile(filepath.Join(recipe.Root(), "examples", "policy-sender-rate.toml"))
	if err != nil {
		t.Fatal(err)
	}
	at := strings.Index(string(policy), "\n[[policy.rule]]") + 1
	if at == 0 {
		t.Fatal("examples/policy-sender-rate.toml has no [[policy.rule]] table")
	}
	rule := string(policy[at:]) // the rule, as the example's comment says to copy it
	files := map[string]string{
		"sluice.toml":          "include_dir = \"conf.d\"\n" + move(string(example)),
		"conf.d/10-anvil.toml": move(recipe.Get(t, "docs/anvil.md", "anvil-config")),
		"conf.d/20-milter.toml": move(recipe.Replace(t, recipe.Get(t, "docs/milter.md", "milter-config"),
			`["inet:127.0.0.1:8891"]`, `["unix:/var/spool/postfix/sluice/milter"]`)),
		"conf.d/30-mux-web.toml": move(recipe.Replace(t, recipe.Get(t, "docs/mux.md", "mux-unpriv-web"),
			"/run/mimedefang/mimedefang-multiplexor-unpriv.sock", unpriv)),
		"conf.d/50-sender-rate.toml": rule,
		"conf.d/90-test.toml": "[[class]]\nname = \"local\"\nrefuse = 2\n[class.anvil]\nclient_connection_rate_limit = 5\n" +
			"[anvil.smtpd]\nclient_connection_rate_limit = 100\n",
	}
	for _, u := range []string{"sluice.service", "sluice.socket", "sluice-web.socket", "sluice-milter.socket"} {
		files["systemd/"+u] = moved.Replace(unitText(t, u))
	}
	for name, body := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// mergedSessions is TestRecipesMergedIntoExample's load, measured at the
// SMTP client: the sender rate, the class cap, the class's anvil rate.
func mergedSessions(t *testing.T, ctx context.Context, inst *postfixtest.Instance, smtpPort int, p *relProc) {
	ident := fmt.Sprintf("127.0.0.1:%d:127.0.0.1", smtpPort)
	waitCount := func(n int64) { // a slot is free once smtpd has told the anvil
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			cl, err := anviltest.Dial("unix", inst.AnvilSocketPath(), false)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cl.Do("lookup", ident)
			cl.Close()
			if err != nil {
				t.Fatal(err)
			}
			if got["count"] == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("anvil lookup %s: %v, want count %d", ident, got, n)
			}
		}
	}
	dial := func(what string, want int) *postfixtest.SMTPConn {
		t.Helper()
		c, g, err := postfixtest.DialSMTP(ctx, smtpPort)
		if err != nil || g.Code != want {
			t.Fatalf("%s: greeting %v %v, want %d\n%s", what, g, err, want, p.stderr.String())
		}
		if want != 220 {
			c.Close()
			return nil
		}
		if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
			t.Fatalf("%s: EHLO %v %v", what, r, err)
		}
		return c
	}
	// The policy rule: 10 messages per 60 s for one sender (connection 1).
	m := dial("the messages' session", 220)
	for i := range 10 {
		if err := m.SendMessage("sender@example.org", fmt.Sprintf("rcpt%d@example.net", i)); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
	if err := m.SendMessage("sender@example.org", "rcpt11@example.net"); err == nil || !strings.Contains(err.Error(), "450 4.7.1") {
		t.Errorf("the 11th message: %v, want the policy's 450 4.7.1", err)
	}
	m.Cmd("QUIT")
	m.Close()
	waitCount(0)
	a, b := dial("session 1", 220), dial("session 2", 220)
	defer a.Close()
	defer b.Close()
	dial("session 3 (class local holds its 2)", 421)
	if r, err := a.Cmd("QUIT"); err != nil || r.Code != 221 {
		t.Fatalf("QUIT: %v %v", r, err)
	}
	a.Close()
	waitCount(1)
	c := dial("session 4, after one ended", 220)
	defer c.Close()
	b.Cmd("QUIT")
	b.Close()
	dial("connection 6 of the minute (class local's rate is 5)", 421)
	// smtpd logs through postlogd, possibly after its 421 reached the
	// client.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := inst.WaitLog(wctx, "Connection rate limit exceeded"); err != nil {
		log, _ := inst.Log()
		t.Errorf("smtpd's log has no rate refusal: %v\n%s", err, log)
	}
	// [anvil.smtpd] against main.cf (postfix_config_dir, moved): the start
	// compared them through postconf and warned of the one drift.
	if e := p.stderr.String(); !strings.Contains(e, "anvil.smtpd.client_auth_rate_limit is 0 but "+inst.ConfigDir()+"/main.cf has smtpd_client_auth_rate_limit = 7") ||
		strings.Count(e, "main.cf has") != 1 {
		t.Errorf("the start's warnings of [anvil.smtpd], want exactly the AUTH rate:\n%s", e)
	}
	// The daemon's log line reaches p.stderr through a pipe, possibly after
	// smtpd's 421 reached the client.
	p.stderr.WaitFor(t, "anvil: over the class's limit")
}
