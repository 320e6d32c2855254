package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/control"
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
	add := control.Request{Command: "exempt.add", Args: map[string]string{"rule": "out", "key": "sender=a@b.example"}}
	if r := ask(t, sock, add); !r.OK || !strings.Contains(r.Text, "let through uncounted, until removed") {
		t.Fatalf("exempt.add: %+v", r)
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
