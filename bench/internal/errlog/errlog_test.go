package errlog

import (
	"strings"
	"sync"
	"testing"
)

// TestBudget: the first max errors are described, then exactly one line
// says the rest are not shown, however many goroutines report at once.
func TestBudget(t *testing.T) {
	var b strings.Builder
	var mu sync.Mutex
	l := New(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return b.Write(p) }), "load", 3)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { l.Printf("error %d", i) })
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || lines[3] != "load: further errors not shown" {
		t.Fatalf("got %q", lines)
	}
	for _, l := range lines[:3] {
		if !strings.HasPrefix(l, "load: error ") {
			t.Errorf("line %q", l)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
