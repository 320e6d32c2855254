package mux

// SetOnSubscribe makes n call f with each "?" line a listener sends, in
// that listener's connection goroutine. Call it before Serve.
func (n *Notifier) SetOnSubscribe(f func(line []byte)) { n.onSubscribe = f }
