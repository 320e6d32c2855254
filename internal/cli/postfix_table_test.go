package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/recipe"
	"sluice/internal/testutil/redistest"
)

// tableHost is one MX of the table scenario: a private Postfix whose
// smtpd asks a sluice daemon (started by root, serving as sluice) with
// the policy recipe of docs/policy.md and the rule's table.
type tableHost struct {
	smtpPort int
	daemon   *relProc
	table    string // the daemon's own table file
}

// startTableHost starts one host under base/name; store is appended to
// the example's configuration ("" for the memory store).
func startTableHost(t *testing.T, ctx context.Context, bin, base, name, store string) *tableHost {
	t.Helper()
	policyPort, err1 := postfixtest.FreePort()
	smtpPort, err2 := postfixtest.FreePort()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	policyAddr := "127.0.0.1:" + strconv.Itoa(policyPort)
	mainCF := recipe.MainCF(t, recipe.Replace(t, recipe.Get(t, "docs/policy.md", "policy-main.cf"), "127.0.0.1:10040", policyAddr))
	postfixtest.StartTest(t, ctx, postfixtest.Options{Dir: filepath.Join(base, name+"-postfix"), SMTPPort: smtpPort, MainCF: mainCF, Logf: t.Logf})

	// The table lives outside the config file's directory, so that only
	// the SIGHUP reloads it (the directory of the config file is watched).
	tables := filepath.Join(base, name+"-tables")
	if err := os.Mkdir(tables, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &tableHost{smtpPort: smtpPort, table: filepath.Join(tables, "senders.limits")}
	h.writeTable(t, recipe.Get(t, "docs/policy.md", "policy-table"))
	example := policyExample(t)
	tableKey := recipe.Replace(t, recipe.Get(t, "docs/policy.md", "policy-table-key"), `"senders.limits"`, strconv.Quote(h.table))
	cfg := recipe.Replace(t, example, "127.0.0.1:10040", policyAddr, `limit = ["10/60s exact"]`, tableKey+`limit = ["10/60s exact"]`) + store
	h.daemon = startAsSluice(t, bin, base, name, cfg, policyPort)
	return h
}

func (h *tableHost) writeTable(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(h.table, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// send sends n messages from sender in one SMTP session and returns how
// many were accepted and the last refusal.
func (h *tableHost) send(t *testing.T, ctx context.Context, sender string, n int) (int, error) {
	t.Helper()
	c, greeting, err := postfixtest.DialSMTP(ctx, h.smtpPort)
	if err != nil || greeting.Code != 220 {
		t.Fatalf("greeting %v %v", greeting, err)
	}
	defer c.Close()
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO: %v %v", r, err)
	}
	accepted := 0
	var refused error
	for i := range n {
		if err := c.SendMessage(sender, fmt.Sprintf("rcpt%d@example.net", i)); err != nil {
			refused = err
			continue
		}
		accepted++
	}
	_, _ = c.Cmd("QUIT")
	return accepted, refused
}

// reload adds the docs' entry for sender to the host's table (the
// recipe's table with its first customer replaced by sender), sends the
// daemon SIGHUP and waits for the reload's table line.
func (h *tableHost) reload(t *testing.T, sender string) {
	t.Helper()
	h.writeTable(t, recipe.Replace(t, recipe.Get(t, "docs/policy.md", "policy-table"), "customer@example.com", sender))
	if err := syscall.Kill(h.daemon.pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	h.daemon.stderr.WaitFor(t, `msg="reload: policy.rule table changed" name=sender-rate table=`+h.table+` entries=3 entries_changed=2 added=1 removed=1 changed=0`)
}

// wantRefused checks a refusal is smtpd's 450 4.7.1 with the policy's
// text at limit n.
func wantRefused(t *testing.T, what string, err error, n int) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "450 4.7.1") || !strings.Contains(err.Error(), fmt.Sprintf("%d messages in 60s, limit %d", n, n)) {
		t.Errorf("%s: %v, want the policy's 450 4.7.1 at %d of %d", what, err, n, n)
	}
}

func tablePeers(t *testing.T) (bin, base string, ctx context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Postfix and sluice daemons")
	}
	peer.Root(t, "the daemons are started by root and switch to the user sluice")
	peer.User(t, "sluice")
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	bin, _ = muxBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return bin, deployDir(t), ctx
}

// TestPostfixTableRaisesAfterReload is issue 28's "a table entry raising
// one sender to 20 applies after a reload", with a real Postfix and the
// policy recipe of docs/policy.md (examples/policy-sender-rate.toml with
// the page's table line and table): the sender at 10 of 10 gets 450 from
// smtpd; the page's entry, given to that sender, and SIGHUP to the
// daemon; 10 more are accepted at once and the 21st is refused at 20.
func TestPostfixTableRaisesAfterReload(t *testing.T) {
	t.Parallel()
	bin, base, ctx := tablePeers(t)
	h := startTableHost(t, ctx, bin, base, "mx", "")
	const sender = "sender@example.org"
	n, err := h.send(t, ctx, sender, 11)
	if n != 10 {
		t.Fatalf("%d of 11 accepted before the table entry, want 10", n)
	}
	wantRefused(t, "the 11th message", err, 10)
	h.reload(t, sender)
	n, err = h.send(t, ctx, sender, 11)
	if n != 10 {
		t.Errorf("%d of 11 accepted after the entry raising the sender to 20, want 10", n)
	}
	wantRefused(t, "the 21st message", err, 20)
}

// TestPostfixTableRaisesAfterReloadRedis: the same on two MXs (two
// Postfix instances, two daemons) sharing one real redis-server, each
// daemon with its own copy of the table: the count is shared (10 across
// both, the 11th refused on either), each host's entry raises the sender
// to 20 after its own SIGHUP, and 20 across both is the new limit.
func TestPostfixTableRaisesAfterReloadRedis(t *testing.T) {
	t.Parallel()
	bin, base, ctx := tablePeers(t)
	srv, err := redistest.Start(t.TempDir(), 0)
	if err != nil {
		if err == redistest.ErrNoRedis {
			peer.Missing(t, "redis-server", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	store := fmt.Sprintf("\n[store]\nkind = \"redis\"\n[store.redis]\naddrs = [%q]\nkey_prefix = \"sluice:\"\n", srv.Addr())
	a := startTableHost(t, ctx, bin, base, "mx1", store)
	b := startTableHost(t, ctx, bin, base, "mx2", store)
	const sender = "sender@example.org"
	for round, limit := range []int{10, 20} {
		if round == 1 {
			a.reload(t, sender)
			b.reload(t, sender)
		}
		na, _ := a.send(t, ctx, sender, 5)
		nb, _ := b.send(t, ctx, sender, 5)
		if na != 5 || nb != 5 {
			t.Errorf("limit %d: %d and %d of 5 accepted on each MX, want all", limit, na, nb)
		}
		for _, h := range []*tableHost{a, b} {
			n, err := h.send(t, ctx, sender, 1)
			if n != 0 {
				t.Errorf("limit %d: message %d accepted on port %d", limit, limit+1, h.smtpPort)
			}
			wantRefused(t, fmt.Sprintf("message %d", limit+1), err, limit)
		}
	}
}

// TestCheckTable: `sluice check` reads a rule's table, prints it with its
// number of entries, and reports every bad line of a broken one with its
// file and line, in one run.
func TestCheckTable(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "senders.limits")
	if err := os.WriteFile(table, []byte(recipe.Get(t, "docs/policy.md", "policy-table")), 0o644); err != nil {
		t.Fatal(err)
	}
	example := policyExample(t)
	cfg := filepath.Join(dir, "sluice.toml")
	text := fmt.Sprintf("state_dir = %q\n", dir) + recipe.Replace(t, example, `limit = ["10/60s exact"]`, recipe.Get(t, "docs/policy.md", "policy-table-key")+`limit = ["10/60s exact"]`)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run("check", "-c", cfg)
	if want := "per-key limits: " + table + " (3 entries; key sender)"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, output lacks %q:\n%s%s", code, want, out, errs)
	}
	code, _, errs = run("check", "-c", "../config/testdata/bad/policy-table.toml")
	for _, want := range []string{
		"policy-table.toml: 5 error(s)",
		"policy-table.toml:6: policy.rule[1].table: ../config/testdata/bad/broken.limits:3: ",
		"policy-table.toml:6: policy.rule[1].table: ../config/testdata/bad/broken.limits:6: ",
		"policy-table.toml:13: policy.rule[2].table: ../config/testdata/bad/bytes.limits:2: ",
	} {
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("broken tables: exit %d, stderr lacks %q:\n%s", code, want, errs)
		}
	}
}
