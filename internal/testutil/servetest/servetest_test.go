package servetest

import (
	"strings"
	"sync/atomic"
	"testing"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed atomic.Bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(string, ...any) {
	f.failed.Store(true)
	panic(f)
}

func run(r *strings.Reader, conns func() int) (failed bool) {
	f := &fakeT{}
	defer func() {
		if p := recover(); p != nil && p != any(f) {
			panic(p)
		}
		failed = f.failed.Load()
	}()
	ClosedAlone(f, r, conns, 1)
	return false
}

func TestClosedAlone(t *testing.T) {
	var n atomic.Int32
	n.Store(3)
	conns := func() int { return int(n.Add(-1)) + 1 } // 3, 2, 1
	if run(strings.NewReader(""), conns) {
		t.Fatal("EOF and the count falling to 1 failed")
	}
	if !run(strings.NewReader("x"), func() int { return 1 }) {
		t.Fatal("a connection still open passed")
	}
}
