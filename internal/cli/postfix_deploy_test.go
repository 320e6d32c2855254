package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/recipe"
)

// startAsSluice writes cfgText (a recipe, with its state and runtime
// directories under base/name and user = "sluice" in front) and starts
// `sluice serve` on it as root, waiting for the unix sockets socks or the
// TCP port (if not 0); it checks that the daemon, serving, runs as sluice
// with no capability.
func startAsSluice(t *testing.T, bin, base, name, cfgText string, port int, socks ...string) *relProc {
	t.Helper()
	dir := filepath.Join(base, name)
	cfgText = fmt.Sprintf("user = \"sluice\"\nstate_dir = %q\nruntime_dir = %q\n", filepath.Join(dir, "state"), filepath.Join(dir, "run")) + cfgText
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	p := relStart(t, bin, []string{"serve", "-c", cfg}, socks...)
	if port != 0 {
		waitTCP(t, p, port)
	}
	assertUnprivileged(t, p.pid(), "sluice")
	return p
}

// waitTCP waits until something accepts on 127.0.0.1:port.
func waitTCP(t *testing.T, p *relProc, port int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d never answered: %v\n%s", port, err, p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPostfixRecipesAsDeployed runs the Postfix recipes of docs/anvil.md,
// docs/policy.md (with examples/policy-sender-rate.toml) and
// docs/milter.md as deployed, each read from its page: three sluice
// daemons started by root that switch to the user sluice, and one private
// Postfix whose smtpd (user postfix) uses them all. Only addresses and
// directories change, and smtpd_client_event_limit_exceptions is emptied
// so that smtpd asks anvil about a loopback client. Then: ten messages from
// one sender pass the milter (which would tempfail every command were it
// unreachable) and the policy, the eleventh is deferred by the policy; 50
// sessions are held and smtpd, told by sluice's anvil, refuses the 51st
// with 421.
func TestPostfixRecipesAsDeployed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postfix and three daemons")
	}
	peer.Root(t, "the daemons are started by root and switch to the user sluice")
	peer.User(t, "sluice")
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	policyPort, err1 := postfixtest.FreePort()
	milterPort, err2 := postfixtest.FreePort()
	smtpPort, err3 := postfixtest.FreePort()
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	policyAddr, milterAddr := "127.0.0.1:"+strconv.Itoa(policyPort), "127.0.0.1:"+strconv.Itoa(milterPort)

	mainCF := recipe.MainCF(t, recipe.Replace(t, recipe.Get(t, "docs/policy.md", "policy-main.cf"), "127.0.0.1:10040", policyAddr))
	for k, v := range recipe.MainCF(t, recipe.Replace(t, recipe.Get(t, "docs/milter.md", "milter-main.cf"), "127.0.0.1:8891", milterAddr)) {
		mainCF[k] = v
	}
	mainCF["smtpd_client_event_limit_exceptions"] = ""
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{Dir: filepath.Join(base, "postfix"), SMTPPort: smtpPort, MainCF: mainCF, Logf: t.Logf})

	anvilCfg := recipe.Replace(t, recipe.Get(t, "docs/anvil.md", "anvil-config"), "/var/spool/postfix", inst.QueueDir())
	startAsSluice(t, bin, base, "anvil", anvilCfg, 0, inst.AnvilSocketPath())
	assertSocket(t, inst.AnvilSocketPath(), "postfix", "sluice", 0o600)
	startAsSluice(t, bin, base, "policy", recipe.Replace(t, policyExample(t), "127.0.0.1:10040", policyAddr), policyPort)
	startAsSluice(t, bin, base, "milter", recipe.Replace(t, recipe.Get(t, "docs/milter.md", "milter-config"), "127.0.0.1:8891", milterAddr), milterPort)

	// The policy: 10 per 60 s for one sender, through the milter.
	c, greeting, err := postfixtest.DialSMTP(ctx, smtpPort)
	if err != nil || greeting.Code != 220 {
		t.Fatalf("greeting %v %v", greeting, err)
	}
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO: %v %v", r, err)
	}
	for i := range 10 {
		if err := c.SendMessage("sender@example.org", fmt.Sprintf("rcpt%d@example.net", i)); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
	err = c.SendMessage("sender@example.org", "rcpt11@example.net")
	if err == nil || !strings.Contains(err.Error(), "450 4.7.1") || !strings.Contains(err.Error(), "Too much mail from sender=sender@example.org") {
		t.Errorf("the 11th message: %v, want the policy's 450 4.7.1", err)
	}
	_, _ = c.Cmd("QUIT")
	c.Close()

	// The anvil: 50 sessions at once, the 51st refused by smtpd.
	var held []*postfixtest.SMTPConn
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for i := range 50 {
		h, g, err := postfixtest.DialSMTP(ctx, smtpPort)
		if err != nil || g.Code != 220 {
			t.Fatalf("session %d: %v %v", i+1, g, err)
		}
		held = append(held, h)
	}
	h, g, err := postfixtest.DialSMTP(ctx, smtpPort)
	if err == nil {
		held = append(held, h)
	}
	if err != nil || g.Code != 421 {
		t.Errorf("the 51st session: %v %v, want smtpd's 421 (sluice's anvil counted 50)", g, err)
	}
	if log, err := inst.Log(); err != nil {
		t.Error(err)
	} else if strings.Contains(log, "connect to private/anvil") {
		t.Errorf("smtpd could not reach sluice's anvil:\n%s", log)
	}
}

// policyExample is examples/policy-sender-rate.toml without its own state
// and runtime directories (a test's daemon gets directories of its own).
func policyExample(t *testing.T) string {
	t.Helper()
	example, err := os.ReadFile(filepath.Join(recipe.Root(), "examples", "policy-sender-rate.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return recipe.Replace(t, string(example),
		"state_dir = \"/var/lib/sluice-policy-example\"\n", "", "runtime_dir = \"/run/sluice-policy-example\"\n", "")
}
