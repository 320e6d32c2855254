package pool_test

import (
	"os"
	"testing"
	"time"

	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
)

// TestOwnerFrontEnd: what a front end does on the owner (pool.Owner).
// A watch runs its function once the descriptor is readable, once per
// arm; a timer fires unless stopped; Submit from the owner calls done on
// the owner; SnapshotInto sees the pool; and once the pool has stopped,
// OnOwner refuses and Done is closed.
func TestOwnerFrontEnd(t *testing.T) {
	p, stop := pooltest.Run(t, baseConfig())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var rfd int
	_ = rc.Control(func(fd uintptr) { rfd = int(fd) })

	events := make(chan string, 16)
	onOwner := func(f func(*pool.Owner)) {
		t.Helper()
		ran := make(chan struct{})
		if !p.OnOwner(func(o *pool.Owner) { f(o); close(ran) }, nil) {
			t.Fatal("OnOwner refused while the pool runs")
		}
		<-ran
	}
	onOwner(func(o *pool.Owner) {
		if err := o.Watch(rfd, func() { events <- "readable" }); err != nil {
			t.Errorf("Watch: %v", err)
		}
		o.Arm(new(pool.OwnerTimer), 20*time.Millisecond, func() { events <- "timer" })
		var stopped pool.OwnerTimer
		o.Arm(&stopped, 10*time.Millisecond, func() { events <- "stopped timer" })
		stopped.Stop()
	})
	want := func(ev string) {
		t.Helper()
		select {
		case got := <-events:
			if got != ev {
				t.Fatalf("event %q, want %q", got, ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event, want %q", ev)
		}
	}
	want("timer")
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	want("readable")
	// Spent: more data fires nothing until the watch is armed again.
	if _, err := w.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	onOwner(func(o *pool.Owner) {
		o.Arm(new(pool.OwnerTimer), 50*time.Millisecond, func() { events <- "after spent watch" })
	})
	want("after spent watch")
	onOwner(func(o *pool.Owner) {
		if err := o.Watch(rfd, func() { events <- "re-armed" }); err != nil {
			t.Errorf("Watch again: %v", err)
		}
	})
	want("re-armed")
	onOwner(func(o *pool.Owner) {
		o.Forget(rfd)
		var snap pool.Snapshot
		if o.SnapshotInto(&snap, nil); len(snap.Slots) != 2 {
			t.Errorf("Snapshot on the owner: %d slots, want 2", len(snap.Slots))
		}
		o.Submit(pool.Request{Line: "scan Q1 /tmp"}, func(r pool.Result) {
			if r.Err != nil {
				events <- "submit failed: " + r.Err.Error()
				return
			}
			events <- "submitted: " + string(r.Reply)
		})
	})
	want("submitted: ok\n")

	stop()
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after the pool stopped")
	}
	if p.OnOwner(func(*pool.Owner) { t.Error("ran after the stop") }, func() { t.Error("dropped after the stop") }) {
		t.Fatal("OnOwner accepted after the stop")
	}
}
