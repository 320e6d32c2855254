package mux

import (
	"syscall"
	"testing"
	"time"
)

// SetOnSubscribe makes n call f with each "?" line a listener sends, in
// that listener's connection goroutine. Call it before Serve.
func (n *Notifier) SetOnSubscribe(f func(line []byte)) { n.onSubscribe = f }

// SetFrontAccept replaces the owner's accept4 until the test ends.
func SetFrontAccept(t testing.TB, f func(lfd uintptr) (int, syscall.Errno)) {
	old := frontAccept
	frontAccept = f
	t.Cleanup(func() { frontAccept = old })
}

// FrontStep is a step of the main socket's front on the owner (front.go).
type FrontStep = frontStep

// The steps a test can wait for.
const (
	FrontAsked   = frontAsked
	FrontAwait   = frontAwait
	FrontHandOff = frontHandOff
	FrontBackoff = frontBackoff
)

// SetFrontHook has f told each step of the front until the test ends;
// f runs on the goroutine that takes the step (mostly the pool's owner)
// and must not block. Call it before the pool and the server start.
func SetFrontHook(t testing.TB, f func(step FrontStep, d time.Duration)) {
	old := frontHook
	frontHook = f
	t.Cleanup(func() { frontHook = old })
}
