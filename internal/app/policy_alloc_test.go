package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"sluice/internal/policy"
)

// rcptRequest is a Postfix 3.7 RCPT request as smtpd sends it (the
// attributes of a captured one).
const rcptRequest = `request=smtpd_access_policy
protocol_state=RCPT
protocol_name=ESMTP
client_address=192.0.2.10
client_name=mail.example.net
client_port=41234
reverse_client_name=mail.example.net
server_address=192.0.2.1
server_port=25
helo_name=mail.example.net
sender=alice@example.net
recipient=bob@example.org
recipient_count=0
queue_id=
instance=1a2b.6543.abc.0
size=12345
etrn_domain=
stress=
sasl_method=
sasl_username=
sasl_sender=
ccert_subject=
ccert_issuer=
ccert_fingerprint=
ccert_pubkey_fingerprint=
encryption_protocol=TLSv1.3
encryption_cipher=TLS_AES_256_GCM_SHA384
encryption_keysize=256
policy_context=
compatibility_level=3.6
mail_version=3.7.11

`

// noMatchConfig is a policy door with a rule no request of rcptRequest's
// sender matches.
func noMatchConfig(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[policy]
listen = ["unix:%s"]
[[policy.rule]]
name = "partners"
sender_domain = ["partner.example"]
count = "recipients"
key = ["sender"]
limit = ["100/60s exact"]
`, dir, filepath.Join(dir, "policy"))), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// repeater reads the same bytes for ever, allocating nothing.
type repeater struct {
	b   []byte
	off int
}

func (r *repeater) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.off:])
	r.off = (r.off + n) % len(r.b)
	return n, nil
}

// TestPolicyNoMatchAllocatesNothing: a request no rule matches costs no
// allocation on the policy door's path (decode, the session's check, the
// reply), as the server runs it for each request of a connection.
func TestPolicyNoMatchAllocatesNothing(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, noMatchConfig(t, dir))
	s := &policySession{d: d}
	defer s.Close()
	dec := policy.NewDecoder(&repeater{b: []byte(rcptRequest)}, policy.Limits{})
	var req policy.Request
	out := make([]byte, 0, 256)
	ctx := context.Background()
	one := func() {
		if err := dec.Decode(&req); err != nil {
			t.Fatal(err)
		}
		action, err := s.Check(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		out = policy.AppendReply(out[:0], action)
	}
	one() // the buffers grow to the request's size
	if string(out) != "action=DUNNO\n\n" {
		t.Fatalf("reply %q, want DUNNO", out)
	}
	if n := testing.AllocsPerRun(1000, one); n != 0 {
		t.Fatalf("%v allocations per request, want 0", n)
	}
}

// BenchmarkPolicyDoorNoMatch is one request no rule matches, over the
// policy door's unix socket, from the client's write to its read of the
// reply (allocations counted in the whole process: the client's loop
// allocates nothing).
func BenchmarkPolicyDoorNoMatch(b *testing.B) {
	dir := b.TempDir()
	startDaemon(b, noMatchConfig(b, dir))
	c, err := net.Dial("unix", filepath.Join(dir, "policy"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req, want := []byte(rcptRequest), "action=DUNNO\n\n"
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < len(want) {
			n, err := c.Read(buf[got:])
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		if string(buf[:got]) != want {
			b.Fatalf("reply %q", buf[:got])
		}
	}
}
