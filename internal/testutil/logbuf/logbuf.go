// Package logbuf is a log destination for tests whose logger is written
// from several goroutines.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a bytes.Buffer safe for concurrent Write and String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the lines written so far that contain substr (all lines
// for ""), without their newlines.
func (l *Buffer) Lines(substr string) []string {
	var out []string
	for _, s := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if s != "" && strings.Contains(s, substr) {
			out = append(out, s)
		}
	}
	return out
}

// WaitFor waits until everything written contains each of subs, and fails
// t if that takes more than 30 s (a bound against a hang, not a timing
// requirement).
func (l *Buffer) WaitFor(t testing.TB, subs ...string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		out, all := l.String(), true
		for _, s := range subs {
			all = all && strings.Contains(out, s)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", subs, out)
		}
	}
}
