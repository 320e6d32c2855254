package app

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil/postfixtest"
)

// TestPostfixAnvilAndMilterOneSlot: a private Postfix 3.7 asks sluice as
// its anvil and as its milter about every SMTP session; the class capped
// at 2 admits exactly two concurrent sessions (each holds one slot, found
// across the doors by smtpd's process id), the third gets anvil's 421,
// and a session that ends frees its slot for a new one.
func TestPostfixAnvilAndMilterOneSlot(t *testing.T) {
	state := t.TempDir()
	inst, port := startPostfix(t, false, map[string]string{
		"smtpd_milters":         "unix:" + filepath.Join(state, "milter"),
		"milter_default_action": "tempfail",
	})
	body := fmt.Sprintf(`[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 2
[[class]]
name = "rest"
match = ["*"]
[anvil]
listen = ["unix:%s"]
[anvil.socket]
owner = "postfix"
mode = "0600"
[anvil.smtpd]
client_connection_count_limit = 50
[policy]
enabled = false
[throttle]
enabled = false
[milter]
listen = ["unix:milter"]
[milter.socket]
owner = "postfix"
mode = "0600"
`, inst.AnvilSocketPath())
	d, _ := startMilterDaemon(t, state, fmt.Sprintf("state_dir = %q\n", state)+body)
	var held []*postfixtest.SMTPConn
	for i := range 2 {
		c, r := dialSMTP(t, port)
		defer c.Close()
		if r.Code != 220 {
			t.Fatalf("session %d: greeting %v, want 220 (a class of 2 must admit 2)", i+1, r)
		}
		if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
			t.Fatalf("session %d: EHLO %v %v", i+1, r, err)
		}
		held = append(held, c)
		waitHeld(t, d, "loopback", int64(i+1))
	}
	c, r := dialSMTP(t, port)
	c.Close()
	if r.Code != 421 || !strings.Contains(r.Text, "too many connections") {
		t.Fatalf("third session: greeting %v, want anvil's 421 too many connections", r)
	}
	waitHeld(t, d, "loopback", 2)
	if r, err := held[0].Cmd("QUIT"); err != nil || r.Code != 221 {
		t.Fatalf("QUIT: %v %v", r, err)
	}
	held[0].Close()
	waitHeld(t, d, "loopback", 1)
	c, r = dialSMTP(t, port)
	defer c.Close()
	if r.Code != 220 {
		t.Fatalf("a session after one ended: %v, want 220", r)
	}
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO: %v %v", r, err)
	}
	waitHeld(t, d, "loopback", 2)
}
