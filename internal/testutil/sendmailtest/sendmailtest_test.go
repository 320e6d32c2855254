package sendmailtest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sluice/internal/testutil/peer"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireSendmail skips the test loudly unless a private Sendmail can run.
func requireSendmail(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		peer.Missing(t, "a private Sendmail instance", err)
	}
}

// hangGuard bounds a whole test: it only catches a hang.
const hangGuard = 2 * time.Minute

// prepare prepares an instance in a fresh temp dir and registers a cleanup
// that stops it and checks that no sendmail process is left.
func prepare(t *testing.T, o Options) *Instance {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	inst, err := Prepare(ctx, o)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(func() {
		var pids []int
		inst.mu.Lock()
		for s := range inst.sessions {
			pids = append(pids, s.pid)
		}
		inst.mu.Unlock()
		if err := inst.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		inst.mu.Lock()
		left, err := pidsInNetNS(inst.netns)
		inst.mu.Unlock()
		if err != nil || len(left) > 0 {
			t.Errorf("after Stop: processes left %v (%v)", left, err)
		}
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("after Stop: sendmail pid %d still exists", pid)
			}
		}
		if t.Failed() {
			for _, f := range []struct {
				name string
				get  func() (string, error)
			}{{"maillog", inst.Log}, {"smtp trace", inst.Trace}, {"milter debug", inst.MilterDebug}} {
				text, _ := f.get()
				t.Logf("%s of %s:\n%s", f.name, inst.Dir(), text)
			}
		}
	})
	return inst
}

func session(t *testing.T, inst *Instance, client string) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	s, err := inst.SMTPSession(ctx, client)
	if err != nil {
		t.Fatalf("SMTPSession(%q): %v", client, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Session.Close: %v", err)
		}
	})
	return s
}

func greeting(t *testing.T, s *Session) Reply {
	t.Helper()
	r, err := s.Greeting()
	if err != nil {
		t.Fatalf("greeting: %v (stderr: %s)", err, s.Stderr())
	}
	return r
}

func cmd(t *testing.T, s *Session, line string) Reply {
	t.Helper()
	r, err := s.Cmd(line)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return r
}

// rawMilter is a minimal milter server for testing the rig without
// sluice's engine: it answers OPTNEG with version 6 and no actions or
// protocol flags, CONNECT with connectReply, and every other command that
// expects a reply with CONTINUE. It records each command packet.
type rawMilter struct {
	connectReply []byte // code byte + payload, e.g. "c" or "y421 ...\x00"

	mu      sync.Mutex
	packets []packet
}

type packet struct {
	code byte
	data []byte
}

func startRawMilter(t *testing.T, path string, connectReply []byte) *rawMilter {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	m := &rawMilter{connectReply: connectReply}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { m.serve(c) })
		}
	})
	return m
}

func (m *rawMilter) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(hangGuard))
	r := bufio.NewReader(c)
	write := func(code byte, data []byte) error {
		b := binary.BigEndian.AppendUint32(nil, uint32(1+len(data)))
		_, err := c.Write(append(append(b, code), data...))
		return err
	}
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 || n > 1<<20 {
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		m.mu.Lock()
		m.packets = append(m.packets, packet{buf[0], buf[1:]})
		m.mu.Unlock()
		var err error
		switch buf[0] {
		case 'O':
			// Version 6, no actions, no protocol flags: every event
			// is sent and each answered with CONTINUE.
			err = write('O', []byte{0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0})
		case 'C':
			err = write(m.connectReply[0], m.connectReply[1:])
		case 'D', 'A':
		case 'Q':
			return
		default:
			err = write('c', nil)
		}
		if err != nil {
			return
		}
	}
}

// connects returns the payloads of the CONNECT packets received so far.
func (m *rawMilter) connects() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out [][]byte
	for _, p := range m.packets {
		if p.code == 'C' {
			out = append(out, p.data)
		}
	}
	return out
}

// codes returns the command codes received so far, in order.
func (m *rawMilter) codes() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for _, p := range m.packets {
		b.WriteByte(p.code)
	}
	return b.String()
}

// connectInfo is a parsed CONNECT payload.
type connectInfo struct {
	host   string
	family byte
	port   uint16
	addr   string
}

func parseConnect(t *testing.T, p []byte) connectInfo {
	t.Helper()
	host, rest, ok := strings.Cut(string(p), "\x00")
	if !ok || len(rest) < 1 {
		t.Fatalf("malformed CONNECT payload %q", p)
	}
	ci := connectInfo{host: host, family: rest[0]}
	if ci.family == '4' || ci.family == '6' {
		if len(rest) < 4 {
			t.Fatalf("malformed CONNECT payload %q", p)
		}
		ci.port = binary.BigEndian.Uint16([]byte(rest[1:3]))
		ci.addr = strings.TrimSuffix(rest[3:], "\x00")
	}
	return ci
}

func TestNoMilterTempfails(t *testing.T) {
	requireSendmail(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"missing socket", func(*testing.T, string) {}},
		{"nobody listening", func(t *testing.T, path string) {
			// A socket file left behind by a dead milter.
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "milter.sock")
			tc.setup(t, sock)
			inst := prepare(t, Options{Dir: filepath.Join(dir, "sm"), MilterSocket: sock})
			s := session(t, inst, "127.0.0.1")
			if g := greeting(t, s); g.Code != 220 || !strings.HasPrefix(g.Text, Hostname+" ESMTP Sendmail 8.") {
				t.Errorf("greeting = %q, want 220 %s ESMTP Sendmail 8.x", g, Hostname)
			}
			if r := cmd(t, s, "EHLO client.example"); r.Code != 250 {
				t.Errorf("EHLO: %q, want 250", r)
			}
			// F=T: an unreachable milter tempfails every transaction.
			r := cmd(t, s, "MAIL FROM:<sender@example.org>")
			if r.Code != 451 || r.Text != "4.3.2 Please try again later" {
				t.Errorf("MAIL FROM: %q, want 451 4.3.2 Please try again later", r)
			}
			if r := cmd(t, s, "QUIT"); r.Code != 221 {
				t.Errorf("QUIT: %q, want 221", r)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			if err := s.Wait(ctx); err != nil {
				t.Errorf("sendmail exit: %v", err)
			}
			if err := inst.WaitLog(ctx, "Milter (sluice): to error state"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestConnectRefusal421(t *testing.T) {
	requireSendmail(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "milter.sock")
	m := startRawMilter(t, sock, []byte("y421 4.7.0 test refuse\x00"))
	inst := prepare(t, Options{
		Dir:          filepath.Join(dir, "sm"),
		MilterSocket: "unix:" + sock,
		Hosts:        map[string]string{"127.0.0.2": "client2.example"},
	})
	s := session(t, inst, "127.0.0.2")

	// docs/protocols/milter.md, "Refusing at CONNECT": Sendmail turns a 421 REPLYCODE at CONNECT into its own
	// shutdown reply (the milter's text is dropped) and hangs up.
	g := greeting(t, s)
	if want := "421 4.7.0 " + Hostname + " closing connection"; g.String() != want {
		t.Errorf("greeting = %q, want %q", g, want)
	}
	if r, err := s.ReadReply(); !errors.Is(err, io.EOF) {
		t.Errorf("after the 421: got %q, %v; want EOF", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Errorf("sendmail exit: %v", err)
	}

	cs := m.connects()
	if len(cs) != 1 {
		t.Fatalf("milter saw %d CONNECTs, want 1 (codes %q)", len(cs), m.codes())
	}
	ci := parseConnect(t, cs[0])
	want := connectInfo{host: "client2.example", family: '4', port: s.ClientAddr().Port(), addr: "127.0.0.2"}
	if ci != want {
		t.Errorf("CONNECT = %+v, want %+v", ci, want)
	}
	if s.ClientAddr().Addr() != netip.MustParseAddr("127.0.0.2") {
		t.Errorf("ClientAddr = %v", s.ClientAddr())
	}
	if codes := m.codes(); !strings.HasPrefix(codes, "ODC") {
		t.Errorf("milter commands %q, want OPTNEG, macros, CONNECT first", codes)
	}

	trace, err := inst.Trace()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(trace, ">>> 421 4.7.0 "+Hostname+" closing connection") {
		t.Errorf("SMTP trace lacks the 421:\n%s", trace)
	}
	debug, err := inst.MilterDebug()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(debug, "milter_send_command(sluice): returned y") {
		t.Errorf("milter debug lacks the REPLYCODE:\n%s", debug)
	}
	// The milter's own text reaches Sendmail's log only.
	for _, line := range []string{
		"milter=sluice, action=connect, reject=421 4.7.0 test refuse",
		"Milter: connect: host=client2.example, addr=127.0.0.2, shutdown",
	} {
		if err := inst.WaitLog(ctx, line); err != nil {
			t.Error(err)
		}
	}
}

func TestConnectAdmitted(t *testing.T) {
	requireSendmail(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "milter.sock")
	m := startRawMilter(t, sock, []byte("c"))
	inst := prepare(t, Options{Dir: filepath.Join(dir, "sm"), MilterSocket: sock})

	s := session(t, inst, "127.0.0.1")
	if g := greeting(t, s); g.Code != 220 {
		t.Fatalf("greeting = %q, want 220", g)
	}
	if r := cmd(t, s, "EHLO client.example"); r.Code != 250 || !strings.Contains(r.Text, "PIPELINING") {
		t.Errorf("EHLO: %q, want a multi-line 250", r)
	}
	if err := s.SendMessage("sender@example.org", "rcpt@example.net"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ci := parseConnect(t, m.connects()[0])
	if want := (connectInfo{host: "localhost", family: '4', port: s.ClientAddr().Port(), addr: "127.0.0.1"}); ci != want {
		t.Errorf("CONNECT = %+v, want %+v", ci, want)
	}
	for _, c := range "CHMRTNE" {
		if !strings.ContainsRune(m.codes(), c) {
			t.Errorf("milter never saw %q (commands %q)", c, m.codes())
		}
	}
	entries, err := os.ReadDir(inst.QueueDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Errorf("queue %s is empty after an accepted message", inst.QueueDir())
	}

	// IPv6: family '6'. Sendmail (Debian's build has IPV6_FULL) writes
	// the address uncompressed and with an "IPv6:" prefix, which a milter
	// must strip before parsing (libmilter's mi_inet_pton does).
	s6 := session(t, inst, "::1")
	if g := greeting(t, s6); g.Code != 220 {
		t.Fatalf("greeting over ::1 = %q, want 220", g)
	}
	cs := m.connects()
	ci = parseConnect(t, cs[len(cs)-1])
	if want := (connectInfo{host: "localhost", family: '6', port: s6.ClientAddr().Port(), addr: "IPv6:0:0:0:0:0:0:0:1"}); ci != want {
		t.Errorf("CONNECT over ::1 = %+v, want %+v", ci, want)
	}
}

func TestStopKillsOpenSessions(t *testing.T) {
	requireSendmail(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "milter.sock")
	startRawMilter(t, sock, []byte("c"))
	inst := prepare(t, Options{Dir: filepath.Join(dir, "sm"), MilterSocket: sock})
	var pids []int
	for _, addr := range []string{"127.0.0.3", "127.0.0.4"} {
		s, err := inst.SMTPSession(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		if g := greeting(t, s); g.Code != 220 {
			t.Fatalf("greeting = %q", g)
		}
		pids = append(pids, s.Pid())
	}
	if err := inst.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("sendmail pid %d survived Stop", pid)
		}
	}
	if _, err := inst.SMTPSession(context.Background(), ""); err == nil {
		t.Error("SMTPSession after Stop succeeded")
	}
}

func TestArgumentChecks(t *testing.T) {
	requireSendmail(t)
	ctx := context.Background()
	groupWritable := t.TempDir()
	if err := os.Chmod(groupWritable, 0o770); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{
		{},
		{Dir: t.TempDir(), MilterSocket: "relative.sock"},
		{Dir: t.TempDir(), MilterSocket: "/tmp/a b.sock"},
		{Dir: t.TempDir(), MilterFlags: "X"},
		{Dir: t.TempDir(), MilterSocket: groupWritable + "/milter.sock"},
		{Dir: t.TempDir(), Hosts: map[string]string{"host": "name"}},
		{Dir: t.TempDir(), Hosts: map[string]string{"127.0.0.2": "bad name"}},
	} {
		if _, err := Prepare(ctx, o); err == nil {
			t.Errorf("Prepare(%+v) succeeded", o)
		}
	}
	inst := prepare(t, Options{})
	for _, addr := range []string{"192.0.2.1", "localhost", "fe80::1%lo"} {
		if _, err := inst.SMTPSession(ctx, addr); err == nil {
			t.Errorf("SMTPSession(%q) succeeded", addr)
		}
	}
}
