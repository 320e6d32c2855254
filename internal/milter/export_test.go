package milter

// MustReply is Reply for constant arguments; it panics on an error.
func MustReply(code int, xcode string, lines ...string) Response {
	r, err := Reply(code, xcode, lines...)
	if err != nil {
		panic(err)
	}
	return r
}

// Text returns a Reply's SMTP reply text, "" for the other verdicts.
func (r Response) Text() string { return r.text }

// QueueFull returns how many callbacks were refused for a full queue.
func (s *Server) QueueFull() int64 { return s.queueFull.Load() }

// Partials returns how many packets needed more than one read.
func (s *Server) Partials() int64 { return s.partials.Load() }
