package poolstatus

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"sluice/internal/mux"
	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
	"sluice/internal/status"
)

var fakeWorker string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "poolstatus-worker")
	if err != nil {
		panic(err)
	}
	if fakeWorker, err = pooltest.BuildFakeWorker(dir); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// The two builders agree: a real pool behind a real multiplexor socket,
// with a stopped slot, an idle one that served relayok and a busy one,
// read from its snapshot and through the socket, gives the same slots
// (but for the request count, which "workers" does not carry) and the
// same gauges.
func TestSnapshotAndPollAgree(t *testing.T) {
	dir := t.TempDir()
	p, err := pool.New(pool.Config{
		Program: fakeWorker, Args: []string{"-server"}, Dir: dir, Env: append(os.Environ(), "FAKEWORKER_SLOW_MS=3600000"),
		MinWorkers: 2, MaxWorkers: 3, MaxRequests: 500,
		IdleTime: time.Hour, BusyTimeout: time.Hour, CmdTimeout: 10 * time.Second,
		SlewTime: 10 * time.Millisecond, QueueSize: 4, QueueTimeout: 5 * time.Second,
		KillGrace: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(ctx) }()
	srv := mux.New(mux.Options{Pool: p, Timeout: 10 * time.Second})
	sock := filepath.Join(dir, "mx.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln, true) }()
	hangCtx, stopHang := context.WithCancel(context.Background())
	hangDone := make(chan pool.Result, 1)
	defer func() {
		stopHang()
		<-hangDone
		srv.Close()
		<-serveDone
		cancel()
		<-runDone
	}()
	go func() { hangDone <- p.Do(hangCtx, pool.Request{Line: "recipok <a@b> slow", Queue: true}) }()
	var sn pool.Snapshot
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			var ok bool
			if sn, ok = p.Snapshot(); ok && cond() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool never had %s: %+v", what, sn.Slots)
			}
		}
	}
	waitFor("one idle and one busy worker", func() bool { return sn.Count(pool.Busy) == 1 && sn.Count(pool.Idle) == 1 })
	if r := p.Do(ctx, pool.Request{Line: "relayok 192.0.2.9 host 25 127.0.0.1 25 NOQUEUE", Queue: true}); r.Err != nil {
		t.Fatal(r.Err)
	}
	waitFor("the idle worker done with relayok", func() bool { return sn.Count(pool.Busy) == 1 && sn.Count(pool.Idle) == 1 })
	polled, err := Poll(context.Background(), sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	built := FromSnapshot(sn)
	if len(polled.Slots) != len(built.Slots) {
		t.Fatalf("polled %d slots, built %d", len(polled.Slots), len(built.Slots))
	}
	cmds := map[string]int{}
	for i, b := range built.Slots {
		q := polled.Slots[i]
		cmds[b.State+" "+b.Cmd]++
		if q.State != b.State || q.PID != b.PID || q.Cmd != b.Cmd || q.Tag != b.Tag {
			t.Errorf("slot %d: polled %+v, built %+v", i, q, b)
		}
		if d := q.Since.Sub(b.Since); d < -2*time.Second || d > 2*time.Second {
			t.Errorf("slot %d: polled since %v, built %v", i, q.Since, b.Since)
		}
	}
	if cmds["B recipok"] != 1 || cmds["I relayok"] != 1 || cmds[status.SlotStopped+" "] != 1 {
		t.Errorf("slots not as set up: %v", cmds)
	}
	if polled.Msgs != built.Msgs || polled.Activations != built.Activations || polled.QueueSize != built.QueueSize || polled.Queued != built.Queued {
		t.Errorf("polled %+v, built %+v", *polled, *built)
	}
	if g, w := Gauges(polled), Gauges(built); g != w || g.Busy != 1 || g.Idle != 1 || g.Stopped != 1 {
		t.Errorf("gauges: polled %+v, built %+v", g, w)
	}
}
