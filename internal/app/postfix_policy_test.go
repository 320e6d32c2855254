package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sluice/internal/testutil/peer"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/postfixtest"
)

// postfixWithPolicy starts sluice with the given [[policy.rule]] tables on
// a loopback port, and a private Postfix whose smtpd asks it at stage
// (smtpd_end_of_data_restrictions or smtpd_recipient_restrictions).
func postfixWithPolicy(t *testing.T, restriction, rules string) (*postfixtest.Instance, int) {
	t.Helper()
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	policyPort, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	body := fmt.Sprintf("state_dir = %q\n[anvil]\nenabled = false\n[policy]\nlisten = [\"inet:127.0.0.1:%d\"]\n%s", state, policyPort, rules)
	path := filepath.Join(state, "sluice.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	startDaemonLog(t, path, testLogger(t))
	check := fmt.Sprintf("check_policy_service { inet:127.0.0.1:%d, timeout=10s, default_action=DUNNO }", policyPort)
	mainCF := map[string]string{}
	if restriction == "smtpd_recipient_restrictions" {
		mainCF["smtpd_relay_restrictions"] = "permit_mynetworks, reject"
		mainCF[restriction] = check + ", permit_mynetworks, reject"
	} else {
		mainCF[restriction] = check
	}
	return startPostfix(t, true, mainCF)
}

const senderRule = `
[[policy.rule]]
name = "sender-rate"
count = "messages"
stage = "%s"
key = ["sender"]
limit = ["10/60s exact"]
action = "DEFER_IF_PERMIT 4.7.1 Too much mail from {key}: {count}/{limit} per {period}"
`

// sendMany sends n messages from one sender in one SMTP session and
// returns how many were accepted and the refusals' texts.
func sendMany(t *testing.T, port, n int, sender string) (int, []string) {
	t.Helper()
	c, r := dialSMTP(t, port)
	defer c.Close()
	if r.Code != 220 {
		t.Fatalf("greeting %v", r)
	}
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO %v %v", r, err)
	}
	accepted := 0
	var refused []string
	for i := range n {
		if err := c.SendMessage(sender, fmt.Sprintf("rcpt%d@example.org", i)); err != nil {
			refused = append(refused, err.Error())
			if r, err := c.Cmd("RSET"); err != nil || r.Code != 250 {
				t.Fatalf("RSET %v %v", r, err)
			}
			continue
		}
		accepted++
	}
	return accepted, refused
}

// TestPostfixPolicyEndOfMessage: 15 messages from one sender; exactly 10
// are accepted and 5 deferred with sluice's text, which Postfix logs.
func TestPostfixPolicyEndOfMessage(t *testing.T) {
	inst, port := postfixWithPolicy(t, "smtpd_end_of_data_restrictions", fmt.Sprintf(senderRule, "END-OF-MESSAGE"))
	accepted, refused := sendMany(t, port, 15, "alice@example.net")
	if accepted != 10 || len(refused) != 5 {
		t.Fatalf("accepted %d, refused %d (%q); want 10 and 5", accepted, len(refused), refused)
	}
	for _, r := range refused {
		if !strings.Contains(r, "450 4.7.1 <END-OF-MESSAGE>: End-of-data rejected: Too much mail from sender=alice@example.net: 10/10 per 60s") {
			t.Fatalf("refusal %q", r)
		}
	}
	// Another sender still gets through.
	if a, _ := sendMany(t, port, 1, "bob@example.net"); a != 1 {
		t.Fatal("another sender was refused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := inst.WaitLog(ctx, "reject: END-OF-MESSAGE from localhost[127.0.0.1]: 450 4.7.1 <END-OF-MESSAGE>: End-of-data rejected: Too much mail from sender=alice@example.net"); err != nil {
		t.Fatalf("maillog: %v", err)
	}
}

// TestPostfixPolicyRcpt: the same limit checked at RCPT, counting each
// message once (at its first recipient).
func TestPostfixPolicyRcpt(t *testing.T) {
	inst, port := postfixWithPolicy(t, "smtpd_recipient_restrictions", fmt.Sprintf(senderRule, "RCPT"))
	accepted, refused := sendMany(t, port, 15, "carol@example.net")
	if accepted != 10 || len(refused) != 5 {
		t.Fatalf("accepted %d, refused %d (%q); want 10 and 5", accepted, len(refused), refused)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := inst.WaitLog(ctx, "reject: RCPT from localhost[127.0.0.1]: 450 4.7.1 <rcpt10@example.org>: Recipient address rejected: Too much mail from sender=carol@example.net: 10/10 per 60s"); err != nil {
		t.Fatalf("maillog: %v", err)
	}
}
