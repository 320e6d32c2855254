package socketmap

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
)

var (
	workerOnce sync.Once
	workerDir  string
	workerBin  string
	workerErr  error
)

func fakeWorker(t *testing.T) string {
	t.Helper()
	workerOnce.Do(func() {
		if workerDir, workerErr = os.MkdirTemp("", "socketmap-worker"); workerErr == nil {
			workerBin, workerErr = pooltest.BuildFakeWorker(workerDir)
		}
	})
	if workerErr != nil {
		t.Fatal(workerErr)
	}
	return workerBin
}

func TestCommand(t *testing.T) {
	if got := Command("rev", "hello world"); got != "map rev hello%20world" {
		t.Errorf("%q", got)
	}
	if got := Command("a b%", "x\n\"'\\\x7f"); got != "map a%20b%25 x%0A%22%27%5C%7F" {
		t.Errorf("%q", got)
	}
}

func TestPoolReply(t *testing.T) {
	for _, tc := range []struct {
		r    pool.Result
		want string
	}{
		{pool.Result{Reply: []byte("OK a%20b%41%zz%\n")}, "OK a bA%zz%"},
		{pool.Result{Reply: []byte("NOTFOUND \n")}, "NOTFOUND "},
		{pool.Result{Reply: []byte("OK part")}, "OK part"},
		{pool.Result{Reply: []byte("OK two\n\n")}, "OK two\n"},
		{pool.Result{Err: pool.ErrNoFreeWorkers}, ReplyNoFree},
		{pool.Result{Err: pool.ErrActivate}, ReplyActivate},
		{pool.Result{Err: pool.ErrTalk}, ReplyTalk},
		{pool.Result{Err: pool.ErrNoResponse}, ReplyBusyTimeout},
		{pool.Result{Err: pool.ErrBusyTimeout, BusyWorkers: 9}, ReplyBusyTimeout},
	} {
		got, err := PoolReply(tc.r)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q %v, want %q", tc.r, got, err, tc.want)
		}
	}
	if _, err := PoolReply(pool.Result{Err: pool.ErrClosed}); err != pool.ErrClosed {
		t.Errorf("closed: %v", err)
	}
}

// Through a real pool of one fake worker, with a queue that map requests
// must not use.
func TestPoolHandler(t *testing.T) {
	p, err := pool.New(pool.Config{
		Program: fakeWorker(t), MinWorkers: 1, MaxWorkers: 1, MaxRequests: 500,
		IdleTime: time.Hour, BusyTimeout: time.Second, CmdTimeout: time.Second,
		SlewTime: 10 * time.Millisecond, QueueSize: 5, QueueTimeout: 5 * time.Second,
		KillGrace: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	h := PoolHandler{Pool: p}
	look := func(name, key string) string {
		t.Helper()
		r, err := h.Lookup(context.Background(), name, key)
		if err != nil {
			t.Fatalf("%s %s: %v", name, key, err)
		}
		return r
	}
	// settle waits until the worker slot serves again (after a kill).
	settle := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); look("rev", "ok") != "OK ko"; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the pool never served again")
			}
		}
	}
	settle()
	for _, tc := range [][3]string{
		{"rev", "hello world", "OK dlrow olleh"},
		{"nf", "somekey", "NOTFOUND "},
		{"raw", "OK a%41 b%2x", "OK aA b%2x"},
		{"raw", "TEMP try%20later", "TEMP try later"},
		{"raw", "", ""},
		{"long", "5000", "OK " + strings.Repeat("x", 4093)},
		{"partial", "x", "OK part"},
	} {
		if got := look(tc[0], tc[1]); got != tc[2] {
			t.Errorf("%s %q: %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
	settle()
	if got := look("die", "x"); got != ReplyBusyTimeout {
		t.Errorf("die: %q", got)
	}
	settle()
	// The only worker hangs: another lookup is refused at once, not
	// queued; the hung one times out.
	hung := make(chan string, 1)
	go func() {
		r, _ := h.Lookup(context.Background(), "hang", "x")
		hung <- r
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if sn, ok := p.Snapshot(); ok && sn.Count(pool.Busy) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hang never started")
		}
	}
	// A queued lookup would answer after the hung worker's busy timeout,
	// with another reply: the reply alone tells refused from queued.
	if got := look("rev", "x"); got != ReplyNoFree {
		t.Errorf("while busy: %q, want %q at once", got, ReplyNoFree)
	}
	if got := <-hung; got != ReplyBusyTimeout {
		t.Errorf("hang: %q", got)
	}
	settle()
	cancel()
	<-done
	stopped = true
	if _, err := h.Lookup(context.Background(), "rev", "x"); err == nil {
		t.Error("no error from a stopped pool")
	}
}
