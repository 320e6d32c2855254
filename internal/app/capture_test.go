package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sluice/internal/testutil/peer"
	"strconv"
	"sync"
	"testing"
	"time"

	"sluice/internal/testutil/postfixtest"
)

// recorder is a proxy in front of one of sluice's doors that keeps what
// each client connection sent.
type recorder struct {
	l        net.Listener
	upstream string // unix socket
	mu       sync.Mutex
	streams  [][]byte
	wg       sync.WaitGroup
}

func newRecorder(t *testing.T, l net.Listener, upstream string) *recorder {
	r := &recorder{l: l, upstream: upstream}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() { defer r.wg.Done(); r.relay(c) }()
		}
	}()
	t.Cleanup(func() { l.Close(); r.wg.Wait() })
	return r
}

func (r *recorder) relay(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("unix", r.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	var sent bytes.Buffer
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, up)
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(io.MultiWriter(up, &sent), c)
	up.Close()
	<-done
	if sent.Len() > 0 {
		r.mu.Lock()
		r.streams = append(r.streams, sent.Bytes())
		r.mu.Unlock()
	}
}

// TestCaptureRealTraffic records what a real Postfix (smtpd, as anvil
// client, policy client and milter client) sends sluice while mail flows,
// and writes each connection's bytes as a seed corpus file of the
// decoder's fuzz target (testdata/fuzz/FuzzDecode in internal/anvil,
// internal/policy and internal/milter/wire). Every run checks that each
// of the three doors saw traffic through its recorder; the files are
// written only when SLUICE_CAPTURE_CORPUS=1 (the corpus is checked in, and
// go test runs it as seeds on every run).
func TestCaptureRealTraffic(t *testing.T) {
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	state := t.TempDir()
	body := fmt.Sprintf(`state_dir = %q
[anvil]
listen = ["unix:anvil"]
[anvil.smtpd]
client_connection_count_limit = 50
client_connection_rate_limit = 100
[policy]
listen = ["unix:policy"]
[[policy.rule]]
name = "sender-rate"
count = "messages"
key = ["sender"]
limit = ["3/60s exact"]
[milter]
listen = ["unix:milter"]
policy_rules = true
`, state)
	startDaemon(t, writeConfig(t, state, body))
	policyL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	milterL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	policyRec := newRecorder(t, policyL, filepath.Join(state, "policy"))
	milterRec := newRecorder(t, milterL, filepath.Join(state, "milter"))
	port, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	check := "check_policy_service { inet:" + policyL.Addr().String() + ", timeout=10s, default_action=DUNNO }"
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{
		Dir: t.TempDir(), SMTPPort: port, OwnAnvil: false, Logf: t.Logf,
		MainCF: map[string]string{
			"smtpd_client_connection_count_limit": "50",
			"smtpd_client_connection_rate_limit":  "100",
			"smtpd_client_event_limit_exceptions": "",
			"smtpd_relay_restrictions":            "permit_mynetworks, reject",
			"smtpd_recipient_restrictions":        check + ", permit_mynetworks, reject",
			"smtpd_end_of_data_restrictions":      check,
			"smtpd_milters":                       "inet:" + milterL.Addr().String(),
			"milter_default_action":               "accept",
		},
	})
	anvilL, err := net.Listen("unix", inst.AnvilSocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if u, err := user.Lookup("postfix"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		_ = os.Chown(inst.AnvilSocketPath(), uid, -1)
	}
	anvilRec := newRecorder(t, anvilL, filepath.Join(state, "anvil"))
	for session := range 3 {
		c, r, err := postfixtest.DialSMTP(ctx, port)
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != 220 {
			t.Fatalf("greeting %v", r)
		}
		if _, err := c.Cmd("EHLO client.example"); err != nil {
			t.Fatal(err)
		}
		for m := range 2 {
			// The third message of a sender is refused by the policy.
			_ = c.SendMessage(fmt.Sprintf("sender%d@example.com", session%2), fmt.Sprintf("rcpt%d@example.net", m))
		}
		_, _ = c.Cmd("RSET")
		_, _ = c.Cmd("QUIT")
		c.Close()
	}
	// smtpd's anvil and milter connections end when smtpd does.
	if err := inst.Stop(); err != nil {
		t.Fatal(err)
	}
	// Every stream recorded: each relay ends when its smtpd's connection
	// does.
	for _, rec := range []*recorder{anvilRec, policyRec, milterRec} {
		rec.l.Close()
		ended := make(chan struct{})
		go func() { rec.wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(time.Minute):
			t.Fatal("a connection from smtpd still open a minute after Postfix stopped")
		}
	}
	for _, out := range []struct {
		rec *recorder
		dir string
		max int
	}{
		{anvilRec, "../anvil/testdata/fuzz/FuzzDecode", 2},
		{policyRec, "../policy/testdata/fuzz/FuzzDecode", 3},
		{milterRec, "../milter/wire/testdata/fuzz/FuzzDecode", 3},
	} {
		out.rec.mu.Lock()
		streams := out.rec.streams
		out.rec.mu.Unlock()
		if len(streams) == 0 {
			t.Errorf("nothing recorded for %s", out.dir)
			continue
		}
		if os.Getenv("SLUICE_CAPTURE_CORPUS") != "1" {
			continue
		}
		if err := os.MkdirAll(out.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range streams[:min(len(streams), out.max)] {
			name := filepath.Join(out.dir, fmt.Sprintf("postfix-3.7-smtpd-%d", i))
			if err := os.WriteFile(name, []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(s)))), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d bytes", name, len(s))
		}
	}
}
