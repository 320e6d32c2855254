package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// dropinScript runs docs/mux.md's drop-in recipe in private mount and pid
// namespaces: sluice takes the place of /usr/bin/mimedefang-multiplexor
// and /usr/bin/md-mx-ctrl (bind mounts instead of dpkg-divert and links,
// so the host's files are untouched), then Debian's own init script
// starts MIMEDefang with /etc/default/mimedefang, md-mx-ctrl talks to the
// pool, and the init script stops it. /run and the spool are private
// tmpfs, and the pid namespace keeps the script's killall to its own
// processes.
const dropinScript = `
set -e
mount --make-rprivate /
mount --bind "$SLUICE" /usr/bin/mimedefang-multiplexor
mount --bind "$SLUICE" /usr/bin/md-mx-ctrl
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=0750 tmpfs /var/spool/MIMEDefang
chown defang:defang /var/spool/MIMEDefang
/etc/init.d/mimedefang start
echo "== exe"
ls -l /proc/$(cat /run/mimedefang-multiplexor.pid)/exe | sed 's/.*-> //'
stat -L -c %i /proc/$(cat /run/mimedefang-multiplexor.pid)/exe
stat -c %i "$SLUICE"
echo "== status"
n=0
until md-mx-ctrl status | grep -q 'idle'; do
	n=$((n+1)); [ $n -lt 300 ] || break; sleep 0.1
done
md-mx-ctrl status
echo "== rawstatus"
md-mx-ctrl rawstatus
echo "== stop"
/etc/init.d/mimedefang stop
`

// TestMuxDebianDropIn: MIMEDefang's packaged init script, unchanged, runs
// sluice as its multiplexor, and md-mx-ctrl (sluice ctl) reads its pool.
func TestMuxDebianDropIn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MIMEDefang")
	}
	peer.Root(t, "the drop-in test needs mount namespaces")
	for _, f := range []string{"/etc/init.d/mimedefang", "/usr/bin/mimedefang-multiplexor", "/usr/bin/md-mx-ctrl", "/usr/bin/mimedefang"} {
		if _, err := os.Stat(f); err != nil {
			peer.Missing(t, "MIMEDefang", fmt.Errorf("%w (Debian package mimedefang)", err))
		}
	}
	unshare := peer.Binary(t, "util-linux", "unshare")
	sluice, _ := muxBinaries(t)
	cmd := exec.Command(unshare, "--mount", "--pid", "--fork", "--mount-proc", "sh", "-c", dropinScript)
	cmd.Env = append(os.Environ(), "SLUICE="+sluice)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("drop-in recipe failed: %v\n%s", err, text)
	}
	section := func(name string) string {
		_, rest, _ := strings.Cut(text, "== "+name+"\n")
		s, _, _ := strings.Cut(rest, "\n== ")
		return s
	}
	exe := strings.Fields(section("exe"))
	if len(exe) != 3 || exe[1] != exe[2] {
		t.Fatalf("the running multiplexor is not sluice's binary (inode of its exe vs sluice's): %q\n%s", exe, text)
	}
	st := section("status")
	if !strings.Contains(st, "Max workers") || !strings.Contains(st, "idle") {
		t.Fatalf("md-mx-ctrl status:\n%s\nall:\n%s", st, text)
	}
	raw := strings.Fields(section("rawstatus"))
	if len(raw) < 6 || strings.Trim(raw[0], "SIBK") != "" {
		t.Fatalf("md-mx-ctrl rawstatus: %q\n%s", raw, text)
	}
	if strings.Count(text, "[  OK  ]") != 4 {
		t.Fatalf("the init script did not start and stop both programs cleanly:\n%s", text)
	}
}
