package mux

import (
	"syscall"
	"testing"
)

// SetOnSubscribe makes n call f with each "?" line a listener sends, in
// that listener's connection goroutine. Call it before Serve.
func (n *Notifier) SetOnSubscribe(f func(line []byte)) { n.onSubscribe = f }

// Inlined is how many requests Serve answered or forwarded itself
// (forward.go).
func (s *Server) Inlined() uint64 { return s.inlined.Load() }

// SetFrontAccept replaces the owner's accept4 until the test ends.
func SetFrontAccept(t testing.TB, f func(lfd uintptr) (int, syscall.Errno)) {
	old := frontAccept
	frontAccept = f
	t.Cleanup(func() { frontAccept = old })
}
