package app

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestPolicyExactOverSockets: 1, 8 and 64 policy connections send 200
// END-OF-MESSAGE queries for one sender at once; exactly 10 get DUNNO, as
// the clients count the replies.
func TestPolicyExactOverSockets(t *testing.T) {
	for _, conns := range []int{1, 8, 64} {
		t.Run(fmt.Sprint(conns), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sluice.toml")
			if err := os.WriteFile(path, []byte(fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[policy]
listen = ["inet:127.0.0.1:0"]
[[policy.rule]]
name = "r"
count = "messages"
key = ["sender"]
limit = ["10/60s exact"]
`, dir)), 0o644); err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, path)
			addr := d.Addrs()[0].String()
			var mu sync.Mutex
			actions := map[string]int{}
			var wg sync.WaitGroup
			for w := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Error(err)
						return
					}
					defer c.Close()
					r := bufio.NewReader(c)
					for i := range 200 / conns {
						if _, err := fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.%d\nsender=s@example.org\ninstance=%d.%d\nrecipient_count=1\n\n", w, w, i); err != nil {
							t.Error(err)
							return
						}
						verb, err := readPolicyAction(r)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						actions[verb]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			// Counted as the clients saw them: 10 admitted, every other
			// query refused.
			total := 200 / conns * conns
			if actions["DUNNO"] != 10 || actions["DEFER_IF_PERMIT"] != total-10 {
				t.Fatalf("actions %v: want exactly 10 DUNNO and %d DEFER_IF_PERMIT", actions, total-10)
			}
		})
	}
}
