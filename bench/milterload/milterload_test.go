package main

import (
	"context"
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
	sock := filepath.Join(t.TempDir(), "milter")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	h := &countHandler{}
	srv := milter.NewServer(milter.Options{Handler: h})
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
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
	sock := filepath.Join(t.TempDir(), "milter")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := milter.NewServer(milter.Options{Handler: &countHandler{}})
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
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
