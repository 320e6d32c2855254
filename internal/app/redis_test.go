package app

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sluice/internal/testutil/logbuf"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"

	"sluice/internal/testutil/redistest"
	"sluice/internal/throttle"
)

func startRedis(t *testing.T) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start(t.TempDir(), 0)
	if err != nil {
		if err == redistest.ErrNoRedis {
			peer.Missing(t, "redis-server", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	return srv
}

// redisStoreConfig writes a config in a new directory: limits shared
// through Redis (redisOpts are the [store.redis] lines), anvil off, and
// doors after that.
func redisStoreConfig(t *testing.T, redisOpts, doors string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	body := fmt.Sprintf("state_dir = %q\n[store]\nkind = \"redis\"\n[store.redis]\n%s[anvil]\nenabled = false\n%s", dir, redisOpts, doors)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// senderPolicyDoor is a policy door on a free loopback port admitting 10
// messages a minute per sender.
const senderPolicyDoor = `[policy]
listen = ["inet:127.0.0.1:0"]
[[policy.rule]]
name = "sender"
count = "messages"
key = ["sender"]
limit = ["10/60s exact"]
`

// redisConfig writes a config sharing limits through srv.
func redisConfig(t *testing.T, srv *redistest.Server, prefix, failMode, extra string) string {
	t.Helper()
	return redisStoreConfig(t, fmt.Sprintf(`addrs = [%q]
key_prefix = %q
deadline = "100ms"
lease_ttl = "2s"
fail_mode = %q
`, srv.Addr(), prefix, failMode), senderPolicyDoor+`[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "1000/1s"
concurrency = 2
shared = true
`+extra)
}

// policyAsk sends one END-OF-MESSAGE query and returns the action verb.
func policyAsk(c net.Conn, r *bufio.Reader, sender, instance string) (string, error) {
	if _, err := fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.1\nsender=%s\ninstance=%s\n\n", sender, instance); err != nil {
		return "", err
	}
	return readPolicyAction(r)
}

// readPolicyAction reads one policy reply, "action=VERB text" and a blank
// line, as smtpd would, and returns the verb: only a well-formed reply
// counts as what the client saw.
func readPolicyAction(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	end, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	action, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "action=")
	if !ok || action == "" || end != "\n" {
		return "", fmt.Errorf("malformed policy reply %q %q", line, end)
	}
	verb, _, _ := strings.Cut(action, " ")
	return verb, nil
}

// TestTwoDaemonsShareLimits: two sluice daemons on one Redis, 64 policy
// connections split between them: exactly 10 messages of one sender pass.
// What is measured is the count, not the deadline: the Redis deadline is
// long, so that a loaded host's slow answers are not fail-open decisions
// (TestRedisDownFailModes measures the deadline).
func TestTwoDaemonsShareLimits(t *testing.T) {
	srv := startRedis(t)
	cfg := func() string {
		return redisStoreConfig(t, fmt.Sprintf("addrs = [%q]\nkey_prefix = \"two:\"\ndeadline = \"10s\"\nfail_mode = \"open\"\n", srv.Addr()), senderPolicyDoor)
	}
	logs := &logbuf.Buffer{}
	a := startDaemonLog(t, cfg(), slog.New(slog.NewTextHandler(logs, nil)))
	b := startDaemonLog(t, cfg(), slog.New(slog.NewTextHandler(logs, nil)))
	defer func() {
		if t.Failed() {
			t.Logf("daemon logs:\n%s", logs.String())
		}
	}()
	addrs := []string{a.Addrs()[0].String(), b.Addrs()[0].String()}
	var mu sync.Mutex
	verbs := map[string]int{}
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addrs[w%2])
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for i := range 4 {
				v, err := policyAsk(c, r, "shared@example.org", fmt.Sprint(w, ".", i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				verbs[v]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if verbs["DUNNO"] != 10 || verbs["DEFER_IF_PERMIT"] != 246 {
		t.Fatalf("verbs %v: want exactly 10 DUNNO and 246 DEFER_IF_PERMIT", verbs)
	}
}

// TestRedisDownFailModes: with Redis stopped, decisions come within the
// deadline per the fail mode; when it is back, counting resumes without a
// restart.
func TestRedisDownFailModes(t *testing.T) {
	srv := startRedis(t)
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			d := startDaemon(t, redisConfig(t, srv, "down-"+mode+":", mode, ""))
			c, err := net.Dial("tcp", d.Addrs()[0].String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			if v, _ := policyAsk(c, r, "a@x", "1"); v != "DUNNO" {
				t.Fatalf("before: %s", v)
			}
			srv.Signal(syscall.SIGSTOP)
			start := time.Now()
			v, err := policyAsk(c, r, "a@x", "2")
			took := time.Since(start)
			srv.Signal(syscall.SIGCONT)
			want := map[string]string{"open": "DUNNO", "closed": "DEFER_IF_PERMIT"}[mode]
			if err != nil || v != want {
				t.Fatalf("Redis stopped, fail %s: %q %v, want %s", mode, v, err, want)
			}
			// The deadline is 100 ms; allow a slow machine ten times that.
			if took > time.Second {
				t.Fatalf("decision took %s with Redis stopped", took)
			}
			t.Logf("fail-%s decision with Redis stopped took %s", mode, took.Round(time.Millisecond))
			start = time.Now()
			for i := 0; ; i++ {
				// Counting resumes: the limit of 10 is reached again.
				v, err := policyAsk(c, r, "b@x", fmt.Sprint("r", i))
				if err != nil {
					t.Fatal(err)
				}
				if v == "DEFER_IF_PERMIT" && i >= 10 {
					break
				}
				if i > 1000 {
					t.Fatal("counting did not resume after Redis came back")
				}
			}
			t.Logf("counting resumed %s after Redis came back", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestKilledDaemonLeasesExpire: a daemon killed -9 while its senders hold
// the shared concurrency slots frees them after the lease TTL; a sender
// waiting on the other daemon then gets a slot.
func TestKilledDaemonLeasesExpire(t *testing.T) {
	srv := startRedis(t)
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	pathA := redisConfig(t, srv, "kill:", "open", "")
	a := exec.Command(bin, "serve", "-c", pathA)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Process.Kill()
	sockA := filepath.Join(filepath.Dir(pathA), "throttle")
	var holders []*throttle.Client
	for i := 0; len(holders) < 2; i++ {
		cl, err := throttle.Dial("unix", sockA, time.Second)
		if err != nil {
			if i > 200 {
				t.Fatalf("daemon A did not come up: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if rep, err := cl.Acquire("relay.example"); err != nil || rep.Defer != "" {
			t.Fatalf("A grant: %v %v", rep, err)
		}
		holders = append(holders, cl)
	}
	b := startDaemon(t, redisConfig(t, srv, "kill:", "open", ""))
	sockB := filepath.Join(filepath.Dir(b.cfg.Load().File), "throttle")
	waiter, err := throttle.Dial("unix", sockB, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	got := make(chan error, 1)
	go func() { _, err := waiter.Acquire("relay.example"); got <- err }()
	select {
	case <-got:
		t.Fatal("a third sender got a slot while two were held on the other daemon")
	case <-time.After(500 * time.Millisecond):
	}
	a.Process.Signal(syscall.SIGKILL)
	a.Wait()
	killed := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("slot freed %s after daemon A was killed (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the dead daemon's slots never expired")
	}
	for _, h := range holders {
		h.Close()
	}
}
