package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/milter"
)

// countHandler admits every session and counts those open.
type countHandler struct{ open atomic.Int64 }

func (h *countHandler) Connect(*milter.Session, string, milter.Family, uint16, string) milter.Response {
	h.open.Add(1)
	return milter.Continue
}

func (h *countHandler) Close(*milter.Session) { h.open.Add(-1) }

func TestIdle(t *testing.T) {
	h := &countHandler{}
	sock := serveMilter(t, h)
	r, err := idle(sock, 50, os.Getpid(), 8, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.sessions != 50 || r.before <= 0 || r.after <= 0 || r.closedKiB <= 0 {
		t.Fatalf("result %+v", r)
	}
	if !strings.HasPrefix(r.String(), "sessions=50 rss_before_kib=") {
		t.Fatalf("line %q", r.String())
	}
	if _, err := idle(filepath.Join(t.TempDir(), "none"), 1, os.Getpid(), 1, time.Second); err == nil {
		t.Fatal("idle against a missing socket succeeded")
	}
}

// TestSteps: a handler with CONNECT alone asks for CONNECT alone.
func TestSteps(t *testing.T) {
	sock := serveMilter(t, &countHandler{})
	got, err := steps(sock)
	if err != nil || got != "connect" {
		t.Fatalf("steps = %q, %v; want connect", got, err)
	}
}

func TestUsage(t *testing.T) {
	var out, errOut strings.Builder
	for _, args := range [][]string{nil, {"bogus"}, {"idle"}, {"steps"}, {"postfix"}, {"postfix", "-dir", "x", "-port", "25", "-set", "novalue"}} {
		if rc := realMain(args, os.Stdin, &out, &errOut); rc != 2 {
			t.Errorf("%q: exit %d, want 2", args, rc)
		}
	}
}

// eomHandler refuses the client 10.0.0.1 at CONNECT and counts the
// messages that reach end of message.
type eomHandler struct {
	countHandler
	eoms atomic.Int64
}

func (h *eomHandler) Connect(s *milter.Session, host string, f milter.Family, port uint16, addr string) milter.Response {
	if addr == "10.0.0.1" {
		return milter.Tempfail
	}
	return h.countHandler.Connect(s, host, f, port, addr)
}

func (h *eomHandler) EOM(*milter.Session, *milter.Modifier) milter.Response {
	h.eoms.Add(1)
	return milter.Accept
}

// TestSessions: the load counts sessions, messages and refusals as the
// milter saw them.
func TestSessions(t *testing.T) {
	h := &eomHandler{}
	sock := serveMilter(t, h)
	var out, errOut strings.Builder
	if code := runSessions([]string{"-socket", sock, "-c", "4", "-clients", "4", "-duration", "300ms"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var c, sessions, messages, tempfail, reject, errs int
	var rate float64
	if _, err := fmt.Sscanf(out.String(), "c=%d sessions=%d messages=%d sessions_per_s=%f tempfail=%d reject=%d errors=%d",
		&c, &sessions, &messages, &rate, &tempfail, &reject, &errs); err != nil {
		t.Fatalf("line %q: %v", out.String(), err)
	}
	// Client 1 of 0..3 is 10.0.0.1: a quarter of the sessions.
	if sessions == 0 || tempfail == 0 || errs != 0 || reject != 0 || messages != 2*sessions {
		t.Fatalf("line %q", out.String())
	}
	if got := h.eoms.Load(); got != int64(messages) {
		t.Fatalf("the milter saw %d messages, the load counted %d", got, messages)
	}
}

// serveMilter serves h on a unix socket of the test's own until the test
// ends, and returns the socket's path.
func serveMilter(t *testing.T, h milter.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "milter")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := milter.NewServer(milter.Options{Handler: h})
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return sock
}

// TestLatency: every session's three waits are measured and printed as
// percentiles; a milter that refuses CONNECT fails the run.
func TestLatency(t *testing.T) {
	h := &countHandler{}
	sock := serveMilter(t, h)
	var out, errOut strings.Builder
	if code := runLatency([]string{"-socket", sock, "-n", "20", "-gap", "0s"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var n int
	var gap string
	var neg, conn, eom, sum [3]int
	if _, err := fmt.Sscanf(out.String(), "sessions=%d gap=%s dial_neg_us=%d/%d/%d connect_us=%d/%d/%d eom_us=%d/%d/%d sum_us=%d/%d/%d",
		&n, &gap, &neg[0], &neg[1], &neg[2], &conn[0], &conn[1], &conn[2], &eom[0], &eom[1], &eom[2], &sum[0], &sum[1], &sum[2]); err != nil {
		t.Fatalf("line %q: %v", out.String(), err)
	}
	for _, p := range [][3]int{neg, conn, eom, sum} {
		if p[0] > p[1] || p[1] > p[2] || p[2] <= 0 {
			t.Fatalf("percentiles out of order or zero in %q", out.String())
		}
	}
	if n != 20 || gap != "0s" || sum[2] < conn[2] {
		t.Fatalf("line %q", out.String())
	}
	if h.open.Load() != 0 {
		t.Fatalf("%d sessions left open", h.open.Load())
	}

	refuse := serveMilter(t, refuseHandler{})
	errOut.Reset()
	if code := runLatency([]string{"-socket", refuse, "-n", "10", "-gap", "0s"}, io.Discard, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "session 1: CONNECT answered") {
		t.Fatalf("a refusing milter: exit %d, %q", code, errOut.String())
	}
	if code := runLatency([]string{"-n", "10"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("no -socket: exit %d", code)
	}
}

// refuseHandler tempfails every CONNECT.
type refuseHandler struct{}

func (refuseHandler) Connect(*milter.Session, string, milter.Family, uint16, string) milter.Response {
	return milter.Tempfail
}

func (refuseHandler) Close(*milter.Session) {}
