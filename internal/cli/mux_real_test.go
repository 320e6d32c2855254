package cli

// Tests of `sluice mux` with MIMEDefang's real Perl worker (mimedefang.pl,
// -F a tiny filter written by the test), side by side with the reference
// multiplexor, and end to end behind a private Postfix and the real
// mimedefang milter. They need the Debian mimedefang package (and, for the
// end-to-end test, postfix); they skip loudly when it is missing.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/smtp"
	"net/textproto"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/percent"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/muxref"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
)

const (
	perlWorker   = "/usr/bin/mimedefang.pl"
	milterBinary = "/usr/bin/mimedefang"
	smtpSource   = "/usr/sbin/smtp-source"
	// rejectMarker in a Subject makes the test filter bounce the message.
	rejectMarker = "SLUICE-REJECT"
)

// realFilter is the test's mimedefang filter. %[1]s is the file that
// filter_tick appends "tick <band>" lines to, %[2]s the spool, where
// mimedefang.pl works between requests (its own default is the host's
// /var/spool/MIMEDefang).
const realFilter = `# sluice test filter
$Features{'Path:SPOOLDIR'} = '%[2]s';
sub filter_relay {
    my ($ip, $name, $port, $myip, $myport, $qid) = @_;
    return ('REJECT', "relay $ip refused") if $ip eq '192.0.2.66';
    return ('TEMPFAIL', "relay $name later", 451, '4.7.1', 0) if $name eq 'slowpoke.example';
    return ('CONTINUE', "relay $ip/$name ok");
}
sub filter_sender {
    my ($sender, $ip, $name, $helo) = @_;
    return ('REJECT', "sender $sender refused") if $sender =~ /spammer/;
    return ('ACCEPT_AND_NO_MORE_FILTERING', "sender $sender vip") if $sender =~ /vip/;
    return ('CONTINUE', "sender $sender via $helo ok");
}
sub filter_recipient {
    my ($rcpt, $sender, $ip, $name, $first, $helo, $mailer, $host, $addr) = @_;
    return ('TEMPFAIL', "rcpt $rcpt later") if $rcpt =~ /later/;
    return ('DISCARD', "rcpt $rcpt dropped") if $rcpt =~ /blackhole/;
    return ('CONTINUE', "rcpt $rcpt from $sender ok");
}
sub filter_map {
    my ($map, $key) = @_;
    return ('OK', scalar reverse $key) if $map eq 'rev';
    return ('TEMP', "map $map is down") if $map eq 'down';
    return ('NOTFOUND', '');
}
sub filter_unknown_cmd {
    my ($cmd, @args) = @_;
    return ('ok', 'echo', $cmd, @args) if $cmd eq 'echo';
    return ('error:', "no command $cmd");
}
sub filter_tick {
    my ($band) = @_;
    if (open(my $f, '>>', '%[1]s')) { print $f "tick $band\n"; close($f); }
}
sub filter_begin { }
sub filter {
    my ($entity, $fname, $ext, $type) = @_;
    return action_accept();
}
sub filter_end {
    my ($entity) = @_;
    if ($Subject =~ /` + rejectMarker + `/) {
        action_bounce("subject marker rejected");
        return;
    }
    action_add_header('X-Sluice-Test', "passed $Sender");
}
1;
`

// needReal ends the test (peer.Missing) unless the real MIMEDefang
// programs are here.
func needReal(t *testing.T, programs ...string) {
	t.Helper()
	for _, p := range programs {
		if _, err := os.Stat(p); err != nil {
			peer.Missing(t, p, fmt.Errorf("%w (Debian packages mimedefang, postfix)", err))
		}
	}
}

// writeFilter writes the test filter into dir, the spool it names,
// readable by everyone, and returns its path and the path of its tick
// file.
func writeFilter(t *testing.T, dir string) (filter, ticks string) {
	t.Helper()
	filter, ticks = filepath.Join(dir, "filter.pl"), filepath.Join(dir, "ticks")
	if err := os.WriteFile(filter, []byte(fmt.Sprintf(realFilter, ticks, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	return filter, ticks
}

// chownTo gives path to the -U user (the workers write into work dirs).
func chownTo(t *testing.T, u *user.User, path string) {
	t.Helper()
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Lchown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// muxProc is a multiplexor (sluice's or the reference) run in the
// foreground by a test.
type muxProc struct {
	name   string
	spool  string
	sock   string
	ticks  string
	stderr *logbuf.Buffer
	pid    int
}

// startMuxProc starts argv (a multiplexor in -D mode), stops it with
// SIGTERM (SIGKILL after 30 s) at cleanup, and waits until sock exists.
func startMuxProc(t *testing.T, name string, argv []string, spool, sock string) *muxProc {
	t.Helper()
	cmd := muxref.Command(t, argv...)
	m := &muxProc{name: name, spool: spool, sock: sock, stderr: &logbuf.Buffer{}}
	cmd.Stdout = m.stderr
	cmd.Stderr = m.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	m.pid = cmd.Process.Pid
	t.Cleanup(func() { stopCmd(t, name, cmd, m.stderr) })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return m
		}
		if !alive(m.pid) || time.Now().After(deadline) {
			t.Fatalf("%s: no socket %s; output:\n%s", name, sock, m.stderr.String())
		}
	}
}

// stopCmd sends SIGTERM, waits (SIGKILL after 30 s) and logs the output
// of a failed test's process.
func stopCmd(t *testing.T, name string, cmd *exec.Cmd, out *logbuf.Buffer) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s ignored SIGTERM for 30 s", name)
		_ = cmd.Process.Kill()
		err = <-done
	}
	if t.Failed() {
		t.Logf("%s exited (%v); output:\n%s", name, err, out.String())
	}
}

// startRealPair starts sluice mux and the reference, each with its own
// spool, the real Perl worker and the test filter, with the same options.
func startRealPair(t *testing.T, extra ...string) []*muxProc {
	t.Helper()
	bin, _ := muxBinaries(t)
	uarg, u := asUser(t)
	var out []*muxProc
	for _, name := range []string{"sluice", "reference"} {
		spool := spoolDir(t, u)
		filter, ticks := writeFilter(t, spool)
		sock := filepath.Join(spool, "mx.sock")
		args := append([]string{"-D", "-z", spool, "-s", sock, "-N", filepath.Join(spool, "map.sock"), "-F", filter}, extra...)
		args = append(args, uarg...)
		argv := append([]string{referenceMux}, args...)
		if name == "sluice" {
			argv = append([]string{bin, "mux"}, args...)
		}
		m := startMuxProc(t, name, argv, spool, sock)
		m.ticks = ticks
		out = append(out, m)
	}
	return out
}

// workDir is a scan working directory as the milter makes it
// (mimedefang-protocol(7)): <spool>/mdefang-<id>, mode 0750, owned by the
// -U user, with INPUTMSG, HEADERS and COMMANDS.
func workDir(t *testing.T, u *user.User, spool, id, sender, rcpt, subject string) string {
	t.Helper()
	dir := filepath.Join(spool, "mdefang-"+id)
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	headers := []string{
		"From: <" + sender + ">",
		"To: <" + rcpt + ">",
		"Subject: " + subject,
		"Message-ID: <" + id + "@sluice.test>",
		"Date: Thu, 01 Jan 2026 00:00:00 +0000",
		"MIME-Version: 1.0",
		"Content-Type: text/plain; charset=us-ascii",
	}
	files := map[string]string{
		"INPUTMSG": strings.Join(headers, "\n") + "\n\nHello from the sluice real-worker test.\n",
		"HEADERS":  strings.Join(headers, "\n") + "\n",
		"COMMANDS": strings.Join([]string{
			"S" + percent.Encode("<"+sender+">"),
			"R" + percent.Encode("<"+rcpt+">") + " ? ? ?",
			"U" + percent.Encode(subject),
			"X" + percent.Encode("<"+id+"@sluice.test>"),
			"Q" + id,
			"I127.0.0.1",
			"Hlocalhost",
			"Etester.example",
			"i" + id,
			"F",
		}, "\n") + "\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
		chownTo(t, u, p)
	}
	chownTo(t, u, dir)
	return dir
}

// statusMsgs returns the msgs field of a status reply.
func statusMsgs(t *testing.T, status string) int {
	t.Helper()
	f := strings.Fields(status)
	if len(f) != 6 {
		t.Fatalf("status %q", status)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("status %q", status)
	}
	return n
}

// sluice mux with the real mimedefang.pl workers answers relayok,
// senderok, recipok, scan (of a real work dir), map (main socket and -N),
// unknown commands and ticks with the filter's answers, byte for byte as
// the reference multiplexor does with the same filter.
func TestMuxRealWorkersVsReference(t *testing.T) { testMuxRealWorkers(t) }

// The same with -E (Debian's MX_EMBED_PERL=yes): the reference forks its
// workers from its embedded interpreter, sluice from its perl process,
// which is sluice's child, shown as "sluice mux -E: <program>"; every
// worker is sluice's child too (sluice is their subreaper).
func TestMuxRealWorkersEmbeddedVsReference(t *testing.T) {
	muxes := testMuxRealWorkers(t, "-E")
	children := childCmdlines(t, muxes[0].pid)
	zygotes := 0
	for _, c := range children {
		if strings.HasPrefix(c, "sluice mux -E: "+perlWorker) {
			zygotes++
		}
	}
	if zygotes != 1 || len(children) < 3 {
		t.Errorf("sluice -E's children %q: want its perl and the workers", children)
	}
}

// childCmdlines lists the command lines of pid's children (of each of
// its threads).
func childCmdlines(t *testing.T, pid int) []string {
	t.Helper()
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(files) == 0 {
		t.Fatalf("no /proc/%d/task/*/children: %v", pid, err)
	}
	var kids []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		kids = append(kids, strings.Fields(string(b))...)
	}
	var out []string
	for _, c := range kids {
		cmd, _ := os.ReadFile("/proc/" + c + "/cmdline")
		out = append(out, strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " "))
	}
	return out
}

func testMuxRealWorkers(t *testing.T, extra ...string) []*muxProc {
	needReal(t, perlWorker)
	muxref.Mux(t)
	_, u := asUser(t)
	// -X 1 -P 2: tick bands 0 and 1 every second. -x 4 leaves a worker
	// for the requests while both ticks run.
	muxes := startRealPair(t, append([]string{"-m", "2", "-x", "4", "-X", "1", "-P", "2"}, extra...)...)

	type step struct {
		req  string
		want string // "" = compare with the reference only
	}
	steps := func(m *muxProc) []step {
		wd := workDir(t, u, m.spool, "CWD1", "alice@example.com", "bob@example.net", "cwd")
		return []step{
			{"ping\n", "PONG\n"},
			{"relayok 192.0.2.66 host.example 25 127.0.0.1 25 NOQUEUE\n", "ok 0 relay%20192.0.2.66%20refused 554 5.7.1 0\n"},
			{"relayok 10.1.2.3 slowpoke.example 25 127.0.0.1 25 NOQUEUE\n", "ok -1 relay%20slowpoke.example%20later 451 4.7.1 0\n"},
			{"relayok 10.1.2.3 mx.example 2525 127.0.0.1 25 Q1\n", "ok 1 relay%2010.1.2.3/mx.example%20ok 250 2.1.0 0\n"},
			{"helook 10.1.2.3 mx.example helo.example 2525 127.0.0.1 25 Q1\n", "ok 1 ok 250 2.1.0 0\n"},
			{"senderok " + percent.Encode("<spammer@example.com>") + " 10.1.2.3 mx.example helo.example " + wd + " Q1\n",
				"ok 0 sender%20<spammer@example.com>%20refused 554 5.7.1 0\n"},
			{"senderok " + percent.Encode("<vip@example.com>") + " 10.1.2.3 mx.example helo.example " + wd + " Q1 SIZE=100\n",
				"ok 2 sender%20<vip@example.com>%20vip 250 2.1.0 0\n"},
			{"senderok " + percent.Encode("<alice@example.com>") + " 10.1.2.3 mx.example helo.example " + wd + " Q1\n",
				"ok 1 sender%20<alice@example.com>%20via%20helo.example%20ok 250 2.1.0 0\n"},
			{"recipok " + percent.Encode("<later@example.net>") + " " + percent.Encode("<alice@example.com>") + " 10.1.2.3 mx.example " +
				percent.Encode("<later@example.net>") + " helo.example " + wd + " Q1 ? ? ?\n", "ok -1 rcpt%20<later@example.net>%20later 451 4.3.0 0\n"},
			{"recipok " + percent.Encode("<blackhole@example.net>") + " " + percent.Encode("<alice@example.com>") + " 10.1.2.3 mx.example " +
				percent.Encode("<later@example.net>") + " helo.example " + wd + " Q1 ? ? ?\n", "ok 3 rcpt%20<blackhole@example.net>%20dropped 250 2.1.0 0\n"},
			{"recipok " + percent.Encode("<bob@example.net>") + " " + percent.Encode("<alice@example.com>") + " 10.1.2.3 mx.example " +
				percent.Encode("<bob@example.net>") + " helo.example " + wd + " Q1 smtp example.net bob@example.net\n",
				"ok 1 rcpt%20<bob@example.net>%20from%20<alice@example.com>%20ok 250 2.1.0 0\n"},
			{"map rev hello%20world\n", "OK dlrow%20olleh\n"},
			{"map down key\n", "TEMP map%20down%20is%20down\n"},
			{"map nosuch key\n", "NOTFOUND \n"},
			{"echo a%20b c\n", "ok echo echo a%20b c\n"},
			{"frobnicate x\n", "error: no%20command%20frobnicate\n"},
			{"tick\n", "error: External agents may not invoke 'tick'\n"},
			{"tick 0\n", ""},
		}
	}
	replies := make([][]string, len(muxes))
	var reqs []string
	for i, m := range muxes {
		for _, s := range steps(m) {
			got := muxQuery(t, m.sock, s.req)
			replies[i] = append(replies[i], got)
			if i == 0 {
				reqs = append(reqs, s.req)
			}
			if s.want != "" && got != s.want {
				t.Errorf("%s: %q: got %q, want %q", m.name, s.req, got, s.want)
			}
		}
	}
	for j, req := range reqs {
		if replies[0][j] != replies[1][j] {
			t.Errorf("%q:\nsluice    %q\nreference %q", req, replies[0][j], replies[1][j])
		}
	}

	// Scans of real work dirs: the reply is "ok", and the filter's
	// verdict is in RESULTS (a bounce, or a header added).
	scans := []struct {
		id, subject, results string
	}{
		{"SCAN1", "hello", "HX-Sluice-Test passed%20<alice@example.com>\nF\n"},
		{"SCAN2", "hello " + rejectMarker + " world", "B554 5.7.1 subject%20marker%20rejected\nF\n"},
	}
	results := map[string][]string{}
	for _, m := range muxes {
		before := statusMsgs(t, muxQuery(t, m.sock, "status\n"))
		for _, sc := range scans {
			wd := workDir(t, u, m.spool, sc.id, "alice@example.com", "bob@example.net", sc.subject)
			if got := muxQuery(t, m.sock, "scan "+sc.id+" "+percent.Encode(wd)+"\n"); got != "ok\n" {
				t.Errorf("%s: scan %s: %q", m.name, sc.id, got)
			}
			b, err := os.ReadFile(filepath.Join(wd, "RESULTS"))
			if err != nil {
				t.Errorf("%s: scan %s: %v", m.name, sc.id, err)
			}
			if string(b) != sc.results {
				t.Errorf("%s: scan %s: RESULTS %q, want %q", m.name, sc.id, b, sc.results)
			}
			results[sc.id] = append(results[sc.id], string(b))
		}
		if got := muxQuery(t, m.sock, "scan NOQUEUE "+percent.Encode(filepath.Join(m.spool, "mdefang-missing"))+"\n"); !strings.HasPrefix(got, "error: ") {
			t.Errorf("%s: scan of a missing dir: %q", m.name, got)
		}
		after := statusMsgs(t, muxQuery(t, m.sock, "status\n"))
		if after-before != 3 {
			t.Errorf("%s: msgs went from %d to %d after 3 scans", m.name, before, after)
		}
		if got := muxQuery(t, m.sock, "msgs\n"); got != strconv.Itoa(after)+"\n" {
			t.Errorf("%s: msgs %q, status says %d", m.name, got, after)
		}
		// The load history counts the scans and the relayok checks.
		if f := strings.Fields(muxQuery(t, m.sock, "load\n")); len(f) != 29 || f[0] != "3" {
			t.Errorf("%s: load %q, want 3 scans in the last 10 s", m.name, f)
		}
		if f := strings.Fields(muxQuery(t, m.sock, "load-relayok\n")); len(f) != 29 || f[0] != "3" {
			t.Errorf("%s: load-relayok %q, want 3 in the last 10 s", m.name, f)
		}
	}
	for id, r := range results {
		if len(r) == 2 && r[0] != r[1] {
			t.Errorf("scan %s RESULTS:\nsluice    %q\nreference %q", id, r[0], r[1])
		}
	}

	// The socket map (-N) goes through filter_map, decoded.
	for _, m := range muxes {
		got := mapTalk(t, "unix", filepath.Join(m.spool, "map.sock"), []string{"15:rev hello world,", "10:nosuch key,", "8:down key,"})
		want := []string{"14:OK dlrow olleh,", "9:NOTFOUND ,", "21:TEMP map down is down,"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: socket map %q, want %q", m.name, got, want)
		}
	}

	// Ticks (-X 1 -P 2): filter_tick runs for both bands.
	for _, m := range muxes {
		t.Run("ticks/"+m.name, func(t *testing.T) {
			deadline := time.Now().Add(20 * time.Second)
			for {
				b, _ := os.ReadFile(m.ticks)
				if strings.Contains(string(b), "tick 0\n") && strings.Contains(string(b), "tick 1\n") {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: filter_tick ran as %q after 20 s, want bands 0 and 1", m.name, b)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	return muxes
}

// End to end: a private Postfix whose smtpd_milters is the real mimedefang
// milter, whose multiplexor is sluice mux running mimedefang.pl with the
// test filter. smtp-source sends N ordinary messages, which all reach
// discard(8); a message whose Subject has the marker is refused at the
// end of DATA with the filter's bounce text, and a refused sender at MAIL
// FROM (the milter runs with -r -s -t, so relayok, senderok and recipok
// go through sluice too).
func TestMuxPostfixMilterEndToEnd(t *testing.T) {
	needReal(t, perlWorker, milterBinary, smtpSource)
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	bin, _ := muxBinaries(t)
	uarg, u := asUser(t)
	const messages = 20

	// Sockets live in a short directory under /tmp (sun_path < 108 bytes)
	// that the postfix user can search.
	base, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	muxSpool, milterSpool := filepath.Join(base, "mx"), filepath.Join(base, "md")
	for _, d := range []string{muxSpool, milterSpool} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		chownTo(t, u, d)
	}
	filter, _ := writeFilter(t, muxSpool)
	muxSock, milterSock := filepath.Join(muxSpool, "mx.sock"), filepath.Join(milterSpool, "md.sock")

	startMuxProc(t, "sluice mux", append([]string{bin, "mux", "-D", "-z", muxSpool, "-s", muxSock, "-F", filter,
		"-m", "2", "-x", "4", "-w", "1"}, uarg...), muxSpool, muxSock)

	milter := exec.Command(milterBinary, "-D", "-U", u.Username, "-m", muxSock, "-p", "unix:"+milterSock, "-z", milterSpool, "-r", "-s", "-t")
	milterOut := &logbuf.Buffer{}
	milter.Stdout, milter.Stderr = milterOut, milterOut
	if err := milter.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopCmd(t, "mimedefang milter", milter, milterOut) })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(milterSock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if !alive(milter.Process.Pid) || time.Now().After(deadline) {
			t.Fatalf("the mimedefang milter made no socket %s; output:\n%s", milterSock, milterOut.String())
		}
	}
	// smtpd runs as postfix; the milter's socket is its -U user's.
	if err := os.Chmod(milterSock, 0o666); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{
		Dir: t.TempDir(), SMTPPort: port, OwnAnvil: true, Logf: t.Logf,
		MainCF: map[string]string{
			"smtpd_milters":         "unix:" + milterSock,
			"milter_default_action": "tempfail",
			"milter_protocol":       "6",
		},
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)

	// N ordinary messages, 4 sessions in parallel.
	start := time.Now()
	src := exec.CommandContext(ctx, smtpSource, "-s", "4", "-m", strconv.Itoa(messages), "-M", "tester.example",
		"-f", "alice@example.com", "-t", "bob@example.net", "-S", "ordinary message", addr)
	if out, err := src.CombinedOutput(); err != nil {
		t.Fatalf("smtp-source: %v\n%s", err, out)
	}
	t.Logf("smtp-source sent %d messages in %v", messages, time.Since(start).Round(time.Millisecond))

	// The marked message is refused at the end of DATA with the filter's
	// text; a spammer is refused at MAIL FROM.
	if err := sendMarked(addr); err == nil {
		t.Error("the marked message was accepted")
	} else if te := (*textproto.Error)(nil); !errors.As(err, &te) || te.Code != 554 || te.Msg != "5.7.1 subject marker rejected" {
		t.Errorf("the marked message: %v, want 554 5.7.1 subject marker rejected", err)
	}
	if err := sendFrom(addr, "spammer@example.com"); err == nil {
		t.Error("the spammer's MAIL FROM was accepted")
	} else if te := (*textproto.Error)(nil); !errors.As(err, &te) || te.Code != 554 || te.Msg != "5.7.1 sender <spammer@example.com> refused" {
		t.Errorf("the spammer: %v, want 554 5.7.1 sender <spammer@example.com> refused", err)
	}

	// Every ordinary message reaches discard(8); the marked one does not.
	sent := regexp.MustCompile(`postfix/discard\[\d+\]: [0-9A-F]+: to=<bob@example\.net>.*status=sent`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		log, err := inst.Log()
		if err != nil {
			t.Fatal(err)
		}
		n := len(sent.FindAllString(log, -1))
		if n == messages {
			break
		}
		if n > messages || time.Now().After(deadline) {
			t.Fatalf("%d messages delivered to discard, want %d", n, messages)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := inst.WaitLog(ctx, "milter-reject: END-OF-MESSAGE from localhost[127.0.0.1]: 5.7.1 subject marker rejected"); err != nil {
		t.Error(err)
	}
	// Every message was scanned by a worker of sluice mux.
	if got := muxQuery(t, muxSock, "msgs\n"); got != strconv.Itoa(messages+1)+"\n" {
		t.Errorf("sluice mux msgs %q, want %d scans", got, messages+1)
	}
	if f := strings.Fields(muxQuery(t, muxSock, "load-relayok\n")); len(f) != 29 || f[0] == "0" {
		t.Errorf("sluice mux load-relayok %q: no relayok through sluice", f)
	}
}

// sendMarked sends one message whose Subject has the reject marker and
// returns the error of its end of DATA.
func sendMarked(addr string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hello("tester.example"); err != nil {
		return err
	}
	if err := c.Mail("alice@example.com"); err != nil {
		return err
	}
	if err := c.Rcpt("bob@example.net"); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	msg := "From: <alice@example.com>\r\nTo: <bob@example.net>\r\nSubject: please " + rejectMarker + " this\r\n\r\nbody\r\n"
	if _, err := io.WriteString(w, msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// sendFrom opens a session and returns the error of MAIL FROM:<from>.
func sendFrom(addr, from string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hello("tester.example"); err != nil {
		return err
	}
	if err := c.Mail(from); err != nil {
		return err
	}
	return c.Quit()
}
