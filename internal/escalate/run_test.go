package escalate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/escalate"
	"sluice/internal/governor"
	"sluice/internal/nftset"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/wait"
)

// TestRunAgainstTheHelper: the escalator's requests reach the real
// helper (nftset's server on nft): the address lands in the set. With
// the helper gone a request fails, is counted and shown, and the address
// counts again; with the helper back, the next escalation reconnects.
func TestRunAgainstTheHelper(t *testing.T) {
	peer.Root(t, "the helper changes the ruleset")
	nftPath := peer.Binary(t, "nftables", "/usr/sbin/nft")
	n := &nftset.Nft{Path: nftPath, Table: fmt.Sprintf("sluicetest%d_run", os.Getpid())}
	t.Cleanup(func() { n.Remove(context.Background()) })
	if err := n.Install(t.Context(), nftset.Ruleset{Ports: []int{25}, Size: 64}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "escalate.sock")
	serve := func() *nftset.Server {
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := nftset.NewServer(n, nftset.Options{UID: os.Geteuid(), MaxFor: time.Hour})
		go srv.Serve(l)
		return srv
	}
	srv := serve()
	e := escalate.New(sock, escalate.Settings{After: 2, Within: time.Minute, For: 5 * time.Minute}, clock.Real{},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	refuse := func(addr string) {
		for range 2 {
			e.Observe(governor.Verdict{Door: "milter", Key: "rest", Refused: true, Reason: governor.ReasonHeadroom,
				Client: netip.MustParseAddr(addr), At: time.Now()})
		}
	}
	refuse("198.51.100.20")
	wait.For(t, func() bool { return e.State().Added == 1 }, "the helper added the address")
	if out := list(t, nftPath, n.Table); !strings.Contains(out, "198.51.100.20 timeout 5m") {
		t.Fatalf("set flood4:\n%s", out)
	}

	srv.Close()
	refuse("198.51.100.21")
	wait.For(t, func() bool { return e.State().Failed == 1 }, "the request without a helper failed")
	if st := e.State(); st.Error == "" || st.Dropping != 1 {
		t.Fatalf("state %+v, want the error shown and only the first address dropping", st)
	}
	srv = serve()
	t.Cleanup(func() { srv.Close() })
	refuse("198.51.100.21")
	wait.For(t, func() bool { return e.State().Added == 2 }, "the helper back added the address")
	if st := e.State(); st.Error != "" || st.Dropping != 2 {
		t.Fatalf("state %+v, want the error cleared and 2 dropping", st)
	}
}

func list(t *testing.T, nft, table string) string {
	t.Helper()
	out, err := exec.Command(nft, "list", "set", "inet", table, "flood4").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list set: %v: %s", err, out)
	}
	return string(out)
}
