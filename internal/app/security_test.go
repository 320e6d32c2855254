package app

import (
	"fmt"
	"os"
	"path/filepath"
	"sluice/internal/testutil/peer"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/config"
)

// TestSocketOwnersAndModes: every door's unix socket gets exactly the
// owner, group and mode configured (and the defaults, 0660 and sluice's
// own user, when nothing is set).
func TestSocketOwnersAndModes(t *testing.T) {
	peer.Root(t, "changing a socket's owner needs root")
	owner := peer.User(t, "nobody")
	group := peer.Group(t, "nogroup")
	doors := []struct{ door, mode string }{
		{"anvil", "0600"}, {"policy", "0660"}, {"throttle", "0666"}, {"milter", "0640"}, {"web", "0620"},
	}
	for _, withOwner := range []bool{true, false} {
		t.Run(fmt.Sprintf("owner=%v", withOwner), func(t *testing.T) {
			dir := t.TempDir()
			var b strings.Builder
			fmt.Fprintf(&b, "state_dir = %q\n", dir)
			for _, d := range doors {
				fmt.Fprintf(&b, "[%s]\nlisten = [\"unix:%s.sock\"]\n", d.door, d.door)
				if withOwner {
					fmt.Fprintf(&b, "[%s.socket]\nowner = %q\ngroup = %q\nmode = %q\n", d.door, owner.Username, group.Name, d.mode)
				}
			}
			startDaemon(t, writeConfig(t, dir, b.String()))
			for _, d := range doors {
				fi, err := os.Stat(filepath.Join(dir, d.door+".sock"))
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				wantMode, wantUID, wantGID := "0660", os.Geteuid(), os.Getegid()
				if withOwner {
					wantMode = d.mode
					wantUID, _ = strconv.Atoi(owner.Uid)
					wantGID, _ = strconv.Atoi(group.Gid)
				}
				if got := fmt.Sprintf("%04o", fi.Mode().Perm()); got != wantMode || fi.Mode()&os.ModeSocket == 0 {
					t.Errorf("%s: mode %v, want socket %s", d.door, fi.Mode(), wantMode)
				}
				if int(st.Uid) != wantUID || int(st.Gid) != wantGID {
					t.Errorf("%s: owner %d:%d, want %d:%d", d.door, st.Uid, st.Gid, wantUID, wantGID)
				}
			}
		})
	}
}

// TestListenersDefaultLocal: out of the box every door and the web server
// listen on unix sockets in the runtime directory, no TCP port; an inet
// listener must name the address to bind (no implicit wildcard), and the
// wildcard is taken only when written out.
func TestListenersDefaultLocal(t *testing.T) {
	def := config.Default()
	for door, listen := range map[string][]string{
		"anvil": def.Anvil.Listen, "policy": def.Policy.Listen, "throttle": def.Throttle.Listen, "milter": def.Milter.Listen,
		"web": def.Web.Listen,
	} {
		if len(listen) == 0 {
			t.Errorf("%s has no listener by default", door)
		}
		for _, l := range listen {
			if !strings.HasPrefix(l, "unix:") {
				t.Errorf("%s listens on %q by default, want a unix socket", door, l)
			}
		}
	}
	for _, spec := range []string{"inet::10040", "inet:10040"} {
		if _, _, err := config.ParseListen(spec); err == nil {
			t.Errorf("%q accepted: an inet listener without an address would bind every interface", spec)
		}
	}
	dir := t.TempDir()
	errs := func(body string) string {
		_, errs := config.Load(writeConfig(t, dir, body))
		var s []string
		for _, e := range errs {
			s = append(s, e.Error())
		}
		return strings.Join(s, "\n")
	}
	if got := errs("[policy]\nlisten = [\"inet::10040\"]\n"); !strings.Contains(got, "name the host to bind") {
		t.Errorf("config with inet::PORT: %q", got)
	}
	// Loopback, as the examples write it, binds loopback only.
	d := startDaemon(t, writeConfig(t, dir, fmt.Sprintf("state_dir = %q\n[anvil]\nenabled = false\n[throttle]\nenabled = false\n[milter]\nenabled = false\n[policy]\nlisten = [\"inet:127.0.0.1:0\"]\n", dir)))
	for _, a := range d.Addrs() {
		if a.Network() == "unix" {
			continue // the web server's default socket
		}
		if !strings.HasPrefix(a.String(), "127.0.0.1:") {
			t.Errorf("bound %s, want loopback", a)
		}
	}
}
