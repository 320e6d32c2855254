package throttle

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/peercred"
)

// reporter names a unix socket peer by its uid, gid and pid and a
// loopback TCP peer by its uid (sock_diag) with no gid, and asks trust
// with those credentials; without a trust function every peer is trusted.
func TestReporterIdentifiesPeer(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "unix" {
				addr = filepath.Join(t.TempDir(), "s")
			}
			l, err := net.Listen(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c, err := net.Dial(network, l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var got peercred.Cred
			r := reporter(s, func(c peercred.Cred) bool { got = c; return false })
			if r.Trusted {
				t.Error("trusted although trust said no")
			}
			if got.UID != os.Getuid() {
				t.Errorf("uid %d, want %d", got.UID, os.Getuid())
			}
			want := "uid " + strconv.Itoa(os.Getuid())
			if network == "unix" {
				if got.GID != os.Getgid() || got.PID != os.Getpid() {
					t.Errorf("gid %d pid %d, want %d %d", got.GID, got.PID, os.Getgid(), os.Getpid())
				}
				want += " gid " + strconv.Itoa(os.Getgid()) + " pid " + strconv.Itoa(os.Getpid())
			} else if got.GID != -1 {
				t.Errorf("a TCP peer's gid %d, want -1 (unknown)", got.GID)
			}
			if !strings.HasPrefix(r.Peer, want) {
				t.Errorf("peer %q, want it to start with %q", r.Peer, want)
			}
			if !reporter(s, nil).Trusted {
				t.Error("without a trust function a peer is not trusted")
			}
		})
	}
}
