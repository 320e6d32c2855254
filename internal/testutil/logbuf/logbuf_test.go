package logbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Concurrent writers lose nothing (and -race sees no race).
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprintf(&b, "%d\n", i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
}

func TestLinesAndWaitFor(t *testing.T) {
	var b Buffer
	if got := b.Lines(""); got != nil {
		t.Fatalf("empty buffer: %q", got)
	}
	fmt.Fprint(&b, "level=INFO a\nlevel=DEBUG b\n\nlevel=INFO c\n")
	if got := b.Lines("level=INFO"); strings.Join(got, "|") != "level=INFO a|level=INFO c" {
		t.Fatalf("Lines: %q", got)
	}
	if got := b.Lines(""); len(got) != 3 {
		t.Fatalf("all lines: %q", got)
	}
	go fmt.Fprint(&b, "late\n")
	b.WaitFor(t, "late", "DEBUG b")
}
