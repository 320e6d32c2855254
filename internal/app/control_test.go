package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/control"
	"sluice/internal/testutil/peer"
	"sluice/internal/throttle"
)

// TestControlAllow: root and sluice's own user may give commands; another
// user only as a member of the admin group.
func TestControlAllow(t *testing.T) {
	none := controlAllow("", t.Logf)
	if !none(control.Peer{UID: 0}) || !none(control.Peer{UID: os.Geteuid()}) {
		t.Fatal("root or sluice's user refused")
	}
	if none(control.Peer{UID: 65534, GID: 65534}) {
		t.Fatal("another user admitted without an admin group")
	}
	grp := controlAllow("nogroup", t.Logf)
	if !grp(control.Peer{UID: 65534, GID: 65534}) {
		t.Fatal("a peer in the admin group (its gid) refused")
	}
	if !grp(control.Peer{UID: 65534, GID: 1}) {
		t.Fatal("nobody, whose account's group is nogroup, refused")
	}
	if grp(control.Peer{UID: 54321, GID: 1}) {
		t.Fatal("a peer outside the admin group admitted")
	}
	if warned := controlAllow("no-such-group-sluice", func(string, ...any) {}); warned(control.Peer{UID: 65534, GID: 65534}) {
		t.Fatal("an unknown admin group admitted someone")
	}
}

// TestPeerTrustUsers: named users are trusted by uid, a peer with no
// local uid (a TCP peer off loopback) never, and an unknown name trusts
// no one and is warned about.
func TestPeerTrustUsers(t *testing.T) {
	var warned []string
	trust := peerTrust("throttle reports", []string{"nobody", "no-such-user-sluice"}, nil, func(msg string, _ ...any) { warned = append(warned, msg) }).trusts
	if !trust(control.Peer{UID: 65534, GID: 1}) {
		t.Error("a named user refused")
	}
	if trust(control.Peer{UID: 54321, GID: 54321}) {
		t.Error("an unnamed user trusted")
	}
	if trust(control.Peer{UID: -1, GID: -1}) {
		t.Error("a peer with no local uid trusted")
	}
	if len(warned) != 1 || !strings.HasPrefix(warned[0], "throttle reports: ") {
		t.Errorf("warnings %q, want one for the unknown user", warned)
	}
}

// TestTrustSocketGroup: the group of a unix listener's socket file (as
// systemd's SocketGroup= leaves it) is trusted once added; a TCP
// listener adds none.
func TestTrustSocketGroup(t *testing.T) {
	peer.Root(t, "giving the socket file another group")
	ng := peer.Group(t, "nogroup")
	gid, _ := strconv.Atoi(ng.Gid)
	path := filepath.Join(t.TempDir(), "throttle")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chown(path, -1, gid); err != nil {
		t.Fatal(err)
	}
	trust := peerTrust("throttle reports", nil, nil, t.Logf)
	member := control.Peer{UID: 54321, GID: gid}
	if trust.trusts(member) {
		t.Fatal("a member of the socket's group trusted before the socket was added")
	}
	if got := trust.addSocketGroup(l); got != ng.Gid {
		t.Fatalf("added group %q, want %s", got, ng.Gid)
	}
	if !trust.trusts(member) {
		t.Error("a member of the socket's group (its gid at connect) not trusted")
	}
	if trust.trusts(control.Peer{UID: 54321, GID: 54321}) {
		t.Error("a peer outside the socket's group trusted")
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	if got := trust.addSocketGroup(tl); got != "" {
		t.Errorf("a TCP listener added group %q", got)
	}
}

const controlRule = `
[[policy.rule]]
name = "out"
count = "messages"
key = ["sender"]
limit = ["2/1h exact"]
`

func ask(t *testing.T, sock string, req control.Request) control.Response {
	t.Helper()
	resp, err := control.Do(context.Background(), sock, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestExemptionSurvivesRestart: an exemption set through the control
// socket (memory store) is in the state directory's marks file, so the
// next daemon on it lists it and applies it; the socket has mode 0660.
func TestExemptionSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	body := "state_dir = \"" + dir + "\"\n[anvil]\nenabled = false\n[policy]\nlisten = [\"unix:policy\"]\n" + controlRule
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, errs := config.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	d, err := New(cfg, path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	sock := cfg.ControlSocket()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket: %v %v", fi, err)
	}
	// The key as typed, in another case, is the key the rule counts.
	add := control.Request{Command: "exempt.add", Args: map[string]string{"rule": "out", "key": "sender=A@B.Example"}}
	if r := ask(t, sock, add); !r.OK || !strings.Contains(r.Text, "key sender=a@b.example: let through uncounted, until removed") {
		t.Fatalf("exempt.add: %+v", r)
	}
	if r := ask(t, sock, control.Request{Command: "exempt.add", Args: map[string]string{"rule": "out", "key": "a@b.example"}}); r.OK || !strings.Contains(r.Error, "counts by sender") {
		t.Fatalf("an exemption of a key without its attribute: %+v", r)
	}
	if r := ask(t, sock, control.Request{Command: "exempt.add", Args: map[string]string{"rule": "out", "key": "sender=c@b.example", "raise": "9223372036854775807"}}); r.OK || !strings.Contains(r.Error, "from 1 to 1000000000") {
		t.Fatalf("a raise beyond the cap: %+v", r)
	}
	if r := ask(t, sock, control.Request{Command: "exempt.add", Args: map[string]string{"rule": "nope", "key": "sender=a@b.example"}}); r.OK {
		t.Fatalf("an exemption of an unknown rule: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	d2 := startDaemon(t, path)
	_ = d2
	r := ask(t, sock, control.Request{Command: "exempt.list"})
	var list struct{ Exemptions []struct{ Rule, Key string } }
	if !r.OK || json.Unmarshal(r.Result, &list) != nil || len(list.Exemptions) != 1 || list.Exemptions[0].Key != "sender=a@b.example" {
		t.Fatalf("after a restart: %+v", r)
	}
	attrs := map[string]string{"sender": "a@b.example", "protocol_state": "END-OF-MESSAGE"}
	if r := ask(t, sock, control.Request{Command: "explain", Attrs: attrs}); !r.OK || !strings.Contains(r.Text, "1. out [sender=a@b.example]: exempt") {
		t.Fatalf("explain after a restart: %+v", r)
	}
	if r := ask(t, sock, control.Request{Command: "explain", Attrs: map[string]string{"sender": "a\nb"}}); r.OK {
		t.Fatalf("an attribute with a newline: %+v", r)
	}
	if r := ask(t, sock, control.Request{Command: "no.such"}); r.OK || !strings.Contains(r.Error, "unknown command") {
		t.Fatalf("an unknown command: %+v", r)
	}
}

// TestExplainMatchesDaemon: over random rules (a configuration file) and
// random requests, `explain` through the control socket gives the answer
// the policy door then gives the same request (with a strict rule's
// {count}, which counts the refused attempt, set aside).
func TestExplainMatchesDaemon(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 2))
	keys := []string{`["sender"]`, `["client_address/24/64"]`, `["sender_domain"]`, `["sender", "client_address"]`}
	refused := 0
	for round := range 3 {
		dir := t.TempDir()
		var rules strings.Builder
		for i := range 1 + rng.IntN(3) {
			fmt.Fprintf(&rules, "[[policy.rule]]\nname = \"r%d\"\ncount = \"messages\"\nkey = %s\nlimit = [\"%d/1h %s\"]\nmode = %q\naction = \"DEFER_IF_PERMIT {rule} {key} {count}/{limit}\"\n",
				i, keys[rng.IntN(len(keys))], 1+rng.IntN(4), []string{"exact", "anvil", "smooth"}[rng.IntN(3)], []string{"leaky", "strict"}[rng.IntN(2)])
			if rng.IntN(3) == 0 {
				rules.WriteString("sender_domain = [\"b.example\"]\n")
			}
		}
		path := filepath.Join(dir, "sluice.toml")
		body := fmt.Sprintf("state_dir = %q\n[anvil]\nenabled = false\n[policy]\nlisten = [\"unix:policy\"]\n%s", dir, rules.String())
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		d := startDaemon(t, path)
		ctl := d.cfg.Load().ControlSocket()
		c, err := net.Dial("unix", filepath.Join(dir, "policy"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		strict := regexp.MustCompile(`^DEFER_IF_PERMIT (r\d+) .* (\d+)/\d+$`)
		for i := range 80 {
			attrs := map[string]string{
				"protocol_state": "END-OF-MESSAGE", "instance": fmt.Sprint(round, ".", i),
				"sender":         []string{"a@a.example", "b@b.example", "c@b.example"}[rng.IntN(3)],
				"client_address": []string{"192.0.2.1", "192.0.2.77", "198.51.100.3"}[rng.IntN(3)],
			}
			resp := ask(t, ctl, control.Request{Command: "explain", Attrs: attrs})
			var ex struct{ Answer string }
			if !resp.OK || json.Unmarshal(resp.Result, &ex) != nil {
				t.Fatalf("explain: %+v", resp)
			}
			fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\ninstance=%s\nsender=%s\nclient_address=%s\n\n", attrs["instance"], attrs["sender"], attrs["client_address"])
			line, err := r.ReadString('\n')
			if _, err2 := r.ReadString('\n'); err != nil || err2 != nil {
				t.Fatal(err, err2)
			}
			got := strings.TrimSuffix(strings.TrimPrefix(line, "action="), "\n")
			if m := strict.FindStringSubmatch(got); m != nil && strings.Contains(body, "name = \""+m[1]+"\"") && ruleIsStrict(body, m[1]) {
				got, ex.Answer = strictCount.ReplaceAllString(got, " _/"), strictCount.ReplaceAllString(ex.Answer, " _/")
			}
			if got != ex.Answer {
				t.Fatalf("round %d request %d %v: explain %q, the daemon %q\nrules:\n%s", round, i, attrs, ex.Answer, got, rules.String())
			}
			if got != "DUNNO" {
				refused++
			}
		}
	}
	if refused < 48 {
		t.Fatalf("only %d of 240 requests refused: the comparison hardly covers refusals", refused)
	}
}

var strictCount = regexp.MustCompile(` \d+/`)

// ruleIsStrict says whether the configuration's rule name counts refused
// attempts.
func ruleIsStrict(body, name string) bool {
	_, rest, _ := strings.Cut(body, "name = \""+name+"\"")
	rest, _, _ = strings.Cut(rest, "[[policy.rule]]")
	return strings.Contains(rest, `mode = "strict"`)
}

// TestControlSharedThroughRedis: two daemons on one Redis. A throttle key
// suspended through A's control socket defers B's senders, and its
// resume through A lets them send again; a reset through B forgets the
// count A's senders made, so A admits the sender again.
func TestControlSharedThroughRedis(t *testing.T) {
	srv := startRedis(t)
	a := startDaemon(t, redisConfig(t, srv, "ctl:", "open", ""))
	b := startDaemon(t, redisConfig(t, srv, "ctl:", "open", ""))
	ctlA, ctlB := a.cfg.Load().ControlSocket(), b.cfg.Load().ControlSocket()
	thrB := filepath.Join(filepath.Dir(b.cfg.Load().File), "throttle")
	acquire := func() string {
		t.Helper()
		cl, err := throttle.Dial("unix", thrB, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		rep, err := cl.Acquire("relay.example")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Defer == "" {
			cl.Done()
		}
		return rep.Defer
	}
	if d := acquire(); d != "" {
		t.Fatalf("before the suspension: deferred: %s", d)
	}
	if r := ask(t, ctlA, control.Request{Command: "throttle.suspend", Args: map[string]string{"key": "relay.example", "for": "1h"}}); !r.OK {
		t.Fatalf("suspend on A: %+v", r)
	}
	// B learns of it at its next refresh of the suspended keys (every
	// second): here at once.
	if err := b.throttleBan.RefreshSuspended(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := acquire(); !strings.Contains(d, "relay * is suspended until") || !strings.Contains(d, "suspended by an administrator") {
		t.Fatalf("B during A's suspension: %q", d)
	}
	if r := ask(t, ctlA, control.Request{Command: "throttle.resume", Args: map[string]string{"key": "relay.example"}}); !r.OK || !strings.Contains(r.Text, "resumed") {
		t.Fatalf("resume on A: %+v", r)
	}
	if d := acquire(); d != "" {
		t.Fatalf("B after A's resume: deferred: %s", d)
	}

	pc, err := net.Dial("tcp", a.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pr := bufio.NewReader(pc)
	for i := range 11 {
		v, err := policyAsk(pc, pr, "reset@example.org", fmt.Sprint("m", i))
		if want := map[bool]string{true: "DUNNO", false: "DEFER_IF_PERMIT"}[i < 10]; err != nil || v != want {
			t.Fatalf("message %d on A: %q %v; want %s", i+1, v, err, want)
		}
	}
	if r := ask(t, ctlB, control.Request{Command: "key.reset", Args: map[string]string{"rule": "sender", "key": "sender=reset@example.org"}}); !r.OK || !strings.Contains(r.Text, "reset 1 key(s)") {
		t.Fatalf("reset on B: %+v", r)
	}
	if v, err := policyAsk(pc, pr, "reset@example.org", "after"); err != nil || v != "DUNNO" {
		t.Fatalf("on A after B's reset: %q %v", v, err)
	}
}
