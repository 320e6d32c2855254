// Package errlog is the load generators' error report: the first few
// errors described, then one line saying the rest are not shown, so that
// a server failing under load cannot flood the terminal.
package errlog

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Log describes at most a given number of errors, then stays quiet. It is
// safe for concurrent use.
type Log struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	left   int
	quiet  atomic.Bool
}

// New returns a Log writing to w, each line starting with prefix and ": ",
// that describes at most max errors.
func New(w io.Writer, prefix string, max int) *Log {
	return &Log{w: w, prefix: prefix, left: max}
}

// Printf describes one error; once the budget is spent it says so once,
// then drops the rest (the generators count errors themselves).
func (l *Log) Printf(format string, args ...any) {
	if l.quiet.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left <= 0 {
		if !l.quiet.Swap(true) {
			fmt.Fprintf(l.w, "%s: further errors not shown\n", l.prefix)
		}
		return
	}
	l.left--
	fmt.Fprintf(l.w, "%s: %s\n", l.prefix, fmt.Sprintf(format, args...))
}
