package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/nftset"
	"sluice/internal/status"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/wait"
)

// TestPostfixEscalation: 4 smtpd processes, the catch-all class capped at
// one session, [mta.escalate] after 3: one address holds the session,
// another is refused three times by smtpd through sluice's anvil and is
// then dropped by the kernel through the real helper (nftset on nft, its
// own table, Postfix's port). The one record shows it alike in the
// status (Escalation, its line of text) and the metrics.
func TestPostfixEscalation(t *testing.T) {
	peer.Root(t, "the helper changes the ruleset")
	nftPath := peer.Binary(t, "nftables", "/usr/sbin/nft")
	sockDir := t.TempDir()
	sock := filepath.Join(sockDir, "escalate.sock")
	f := startFloodPostfix(t, 4, fmt.Sprintf(`[[class]]
name = "rest"
match = ["*"]
refuse = 1
[mta.escalate]
socket = %q
after = 3
[web]
listen = ["inet:127.0.0.1:0"]
status_on_inet = true
`, sock))
	n := &nftset.Nft{Path: nftPath, Table: fmt.Sprintf("sluicetest%d_app", os.Getpid())}
	t.Cleanup(func() { n.Remove(context.Background()) })
	if err := n.Install(t.Context(), nftset.Ruleset{Ports: []int{f.port}, Size: 64}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := nftset.NewServer(n, nftset.Options{UID: os.Geteuid(), MaxFor: time.Hour})
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	f.hold("127.0.4.1")
	for range 3 {
		f.refused("127.0.4.2", "the class holds its one session")
	}
	wait.For(t, func() bool { e := f.d.Status().Escalation; return e != nil && e.Added == 1 }, "the helper adds 127.0.4.2")
	e := f.d.Status().Escalation
	if e.Dropping != 1 || e.Failed != 0 || e.Error != "" {
		t.Fatalf("status escalation %+v, want 1 dropping, no failure", e)
	}
	if got := status.EscalationText(e); !strings.HasPrefix(got, "1 address dropped by the kernel · ") || !strings.Contains(got, "1 added, 0 failed") {
		t.Fatalf("status line %q", got)
	}
	m := scrapeMetrics(t, webURL(t, f.d))
	if v := m.value("sluice_mta_escalated_addresses", "state=dropping"); v != 1 {
		t.Errorf("sluice_mta_escalated_addresses{dropping} = %v, want 1", v)
	}
	if v := m.value("sluice_mta_escalations_total", "result=added"); v != 1 {
		t.Errorf("sluice_mta_escalations_total{added} = %v, want 1", v)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	var ne net.Error
	if _, _, err := postfixtest.DialSMTPFrom(ctx, f.port, "127.0.4.2"); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("127.0.4.2 after its escalation: %v, want no answer", err)
	}
	f.refused("127.0.4.3", "another address is still answered")
}
