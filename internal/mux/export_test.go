package mux

// SetOnSubscribe makes n call f with each "?" line a listener sends, in
// that listener's connection goroutine. Call it before Serve.
func (n *Notifier) SetOnSubscribe(f func(line []byte)) { n.onSubscribe = f }

// Forwarded is how many requests Serve forwarded itself (forward.go).
func (s *Server) Forwarded() uint64 { return s.forwarded.Load() }
