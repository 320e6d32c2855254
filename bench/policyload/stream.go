package main

import (
	"math/rand/v2"
)

// stream is what one connection sends: SMTP sessions of one to three
// messages of a random client, each message one RCPT request per
// recipient, then its END-OF-MESSAGE request. It is a state machine, so
// that one event loop can drive every connection.
type stream struct {
	parts   *parts
	clients int
	senders int
	rng     *rand.Rand
	prefix  []byte // instance prefix, unique to this connection and run
	idx     int

	msg      message
	msgsLeft int // messages left in this session, the current one included
	k        int // the next request: RCPT k while k < msg.n, else END-OF-MESSAGE
}

// appendNext appends the next request to dst, starting a new session or
// message first when the last one is over.
func (s *stream) appendNext(dst []byte) []byte {
	if s.msgsLeft == 0 {
		m := &s.msg
		m.client = s.rng.IntN(s.clients)
		m.port = 1024 + s.rng.IntN(65536-1024)
		s.msgsLeft = 1 + s.rng.IntN(3)
		s.newMessage()
	}
	if s.k < s.msg.n {
		return s.parts.appendRequest(dst, &s.msg, false, s.k, s.prefix, s.idx)
	}
	return s.parts.appendRequest(dst, &s.msg, true, 0, s.prefix, s.idx)
}

// newMessage draws the next message of the session.
func (s *stream) newMessage() {
	m := &s.msg
	m.sender = s.rng.IntN(s.senders)
	m.n = 1 + s.rng.IntN(3)
	for k := range m.n {
		m.rcpts[k] = s.rng.IntN(numRecipients)
	}
	m.size = 2000 + s.rng.IntN(98000)
	m.seq++
	s.k = 0
}

// answered moves past the request appendNext last made, once its reply
// came.
func (s *stream) answered() {
	if s.k < s.msg.n {
		s.k++
		return
	}
	s.msgsLeft--
	if s.msgsLeft > 0 {
		s.newMessage()
	}
}

// abandon drops the current session, as smtpd's ends when its policy
// connection breaks: the next request starts a new one.
func (s *stream) abandon() { s.msgsLeft = 0 }
