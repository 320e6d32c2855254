package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/recipe"
)

// TestEscalationAsDeployed: docs/anvil.md's anvil recipe with a
// catch-all class capped at one session and docs/flood.md's escalation
// recipe, as deployed: sluice started by root, serving as sluice with no
// capability; the helper run as examples/systemd/sluice-escalate.service
// runs it (its ExecStart=, as root), on its own table and Postfix's
// port. One address holds the class's session; another, refused ten
// times by smtpd through sluice's anvil, is then dropped by the kernel
// (its connection gets no answer) while a third is still answered (421);
// the helper's socket is root:sluice 0660. When the helper stops its
// table is gone and the dropped address is answered again.
func TestEscalationAsDeployed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postfix, sluice and the helper")
	}
	peer.Root(t, "the helper changes the ruleset and the daemon switches to the user sluice")
	peer.User(t, "sluice")
	nft := peer.Binary(t, "nftables", "/usr/sbin/nft")
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	smtpPort, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{Dir: filepath.Join(base, "postfix"), SMTPPort: smtpPort,
		MainCF: map[string]string{"smtpd_client_event_limit_exceptions": ""}, Logf: t.Logf})

	table := fmt.Sprintf("sluicetest%d", os.Getpid())
	sock := filepath.Join(base, "escalate", "escalate.sock")
	cfgText := recipe.Replace(t, recipe.Get(t, "docs/anvil.md", "anvil-config"), "/var/spool/postfix", inst.QueueDir()) +
		"[[class]]\nname = \"rest\"\nmatch = [\"*\"]\nrefuse = 1\n" +
		recipe.Replace(t, recipe.Get(t, "docs/flood.md", "escalate-config"),
			"/run/sluice-escalate/escalate.sock", sock, "ports = [25]", fmt.Sprintf("ports = [%d]\ntable = %q", smtpPort, table))
	startAsSluice(t, bin, base, "anvil", cfgText, 0, inst.AnvilSocketPath())
	cfg := filepath.Join(base, "anvil", "sluice.toml")

	argv := strings.Fields(readUnit(t, "sluice-escalate.service").one(t, "ExecStart"))
	if len(argv) != 4 || argv[0] != "/usr/local/bin/sluice" || argv[3] != "/etc/sluice/sluice.toml" {
		t.Fatalf("the unit's ExecStart= is %q", argv)
	}
	argv[0], argv[3] = bin, cfg
	helper := relStart(t, argv[0], argv[1:], sock)
	t.Cleanup(func() { exec.Command(nft, "delete", "table", "inet", table).Run() })
	assertSocket(t, sock, "root", "sluice", 0o660)

	dial := func(from string) (*postfixtest.SMTPConn, postfixtest.Reply, error) {
		dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
		defer dcancel()
		return postfixtest.DialSMTPFrom(dctx, smtpPort, from)
	}
	refused := func(from string) {
		t.Helper()
		c, r, err := dial(from)
		if err != nil {
			t.Fatalf("session from %s: %v", from, err)
		}
		c.Close()
		if r.Code != 421 {
			t.Fatalf("session from %s: greeting %v, want smtpd's 421 (the class holds its one session)", from, r)
		}
	}
	holder, r, err := dial("127.0.3.1")
	if err != nil || r.Code != 220 {
		t.Fatalf("the first session: %v %v", r, err)
	}
	defer holder.Close()
	for range 10 {
		refused("127.0.3.2")
	}
	waitUntil(t, "the helper adds 127.0.3.2", func() bool {
		out, _ := exec.Command(nft, "list", "set", "inet", table, "flood4").CombinedOutput()
		return strings.Contains(string(out), "127.0.3.2 ")
	}, func() string { return helper.stderr.String() })
	var ne net.Error
	if _, _, err := dial("127.0.3.2"); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("127.0.3.2 after its escalation: %v, want no answer (its SYN dropped)", err)
	}
	refused("127.0.3.3")

	helper.cmd.Process.Signal(syscall.SIGTERM)
	helper.wait(t, 30*time.Second)
	if out, err := exec.Command(nft, "list", "table", "inet", table).CombinedOutput(); err == nil {
		t.Fatalf("the table outlived the helper:\n%s", out)
	}
	refused("127.0.3.2")
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		t.Fatal("the helper's socket still answers")
	}
}

// TestEscalateHelperRefuses: the helper starts nothing, and makes no
// table, for a configuration another user may write (root would be
// steered by it), one without [mta.escalate] socket, or without -c; each
// with one line that says why.
func TestEscalateHelperRefuses(t *testing.T) {
	peer.Root(t, "the helper runs as root")
	nft := peer.Binary(t, "nftables", "/usr/sbin/nft")
	bin, _ := muxBinaries(t)
	dir := deployDir(t)
	table := fmt.Sprintf("sluicetest%d_refused", os.Getpid())
	body := fmt.Sprintf("[mta.escalate]\nsocket = %q\ntable = %q\n", filepath.Join(dir, "esc", "escalate.sock"), table)
	writable := filepath.Join(dir, "writable.toml")
	if err := os.WriteFile(writable, []byte(body), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(writable, 0o666)
	off := filepath.Join(dir, "off.toml")
	if err := os.WriteFile(off, []byte("[anvil]\nenabled = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"escalate-helper", "-c", writable}, "writable"},
		{[]string{"escalate-helper", "-c", off}, "[mta.escalate] socket is not set"},
		{[]string{"escalate-helper"}, "-c FILE is required"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%q: %v\n%s\nwant a failure saying %q", c.args, err, out, c.want)
		}
	}
	if out, err := exec.Command(nft, "list", "table", "inet", table).CombinedOutput(); err == nil {
		exec.Command(nft, "delete", "table", "inet", table).Run()
		t.Fatalf("a refused helper made its table:\n%s", out)
	}
}
