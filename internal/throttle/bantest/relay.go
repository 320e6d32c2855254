// Package bantest plays the qmail article's scenario: a relay that bans a
// sender for T after more than X sends in any Y (X and Y unknown to
// sluice), a qmail-remote that speaks SMTP to it, and qmail-send's
// queue, which spawns the deliveries at a fixed concurrency and retries
// the deferred ones. The throttle's tests and bench/banload use it.
package bantest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// RelayOptions shape the relay's ban.
type RelayOptions struct {
	// X sends (MAIL commands) are allowed in any Y; the one beyond bans
	// the sender for T.
	X int
	Y time.Duration
	T time.Duration
	// BanReply is the permanent refusal of a banned sender's MAIL
	// (default "554 5.7.1 too many messages, you are blocked for a while").
	BanReply string
	// Unknown recipients are refused with 550 5.1.1 user unknown.
	Unknown map[string]bool
}

// RelayStats are what the relay saw.
type RelayStats struct {
	Delivered int            // messages accepted after DATA
	Refused   int            // MAIL commands refused by a ban
	Bans      int            // bans started
	Recipient map[string]int // deliveries per recipient
	MaxInY    int            // the most accepted MAIL commands in any Y
}

// Relay is a fake SMTP relay on loopback.
type Relay struct {
	o  RelayOptions
	l  net.Listener
	wg sync.WaitGroup

	mu        sync.Mutex
	sends     []time.Time // accepted MAIL commands, for the window
	all       []time.Time // every accepted MAIL command
	bannedTil time.Time
	st        RelayStats
	conns     map[net.Conn]bool
	closed    bool
}

// StartRelay listens on 127.0.0.1 and serves until Close.
func StartRelay(o RelayOptions) (*Relay, error) {
	if o.BanReply == "" {
		o.BanReply = "554 5.7.1 too many messages, you are blocked for a while"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	r := &Relay{o: o, l: l, conns: map[net.Conn]bool{}, st: RelayStats{Recipient: map[string]int{}}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the relay's host:port.
func (r *Relay) Addr() string { return r.l.Addr().String() }

// Stats returns what the relay saw so far.
func (r *Relay) Stats() RelayStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	st.Recipient = make(map[string]int, len(r.st.Recipient))
	for k, v := range r.st.Recipient {
		st.Recipient[k] = v
	}
	j := 0
	for i, t := range r.all {
		for t.Sub(r.all[j]) >= r.o.Y {
			j++
		}
		st.MaxInY = max(st.MaxInY, i-j+1)
	}
	return st
}

// Close stops the relay and its connections.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.l.Close()
	r.wg.Wait()
	return err
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			return
		}
		r.conns[c] = true
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.serve(c)
			r.mu.Lock()
			delete(r.conns, c)
			r.mu.Unlock()
			c.Close()
		}()
	}
}

// mail decides a MAIL command now.
func (r *Relay) mail(now time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.bannedTil) {
		r.st.Refused++
		return r.o.BanReply
	}
	i := 0
	for i < len(r.sends) && now.Sub(r.sends[i]) >= r.o.Y {
		i++
	}
	r.sends = r.sends[i:]
	if len(r.sends) >= r.o.X {
		r.bannedTil = now.Add(r.o.T)
		r.sends = r.sends[:0]
		r.st.Bans++
		r.st.Refused++
		return r.o.BanReply
	}
	r.sends = append(r.sends, now)
	r.all = append(r.all, now)
	return "250 ok"
}

func (r *Relay) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(c, 4096)
	say := func(s string) bool { _, err := fmt.Fprintf(c, "%s\r\n", s); return err == nil }
	if !say("220 relay.test ESMTP") {
		return
	}
	var rcpts []string
	for {
		line, err := br.ReadString('\n')
		if err != nil || len(line) > 1000 {
			return
		}
		cmd := strings.ToUpper(strings.TrimSpace(line))
		switch {
		case strings.HasPrefix(cmd, "HELO"), strings.HasPrefix(cmd, "EHLO"):
			say("250 relay.test")
		case strings.HasPrefix(cmd, "MAIL FROM:"):
			rcpts = rcpts[:0]
			say(r.mail(time.Now()))
		case strings.HasPrefix(cmd, "RCPT TO:"):
			addr := strings.Trim(strings.TrimSpace(line)[len("RCPT TO:"):], "<> \r\n")
			if r.o.Unknown[addr] {
				say("550 5.1.1 <" + addr + ">: user unknown")
				continue
			}
			rcpts = append(rcpts, addr)
			say("250 ok")
		case cmd == "DATA":
			if !say("354 go ahead") {
				return
			}
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
			}
			r.mu.Lock()
			r.st.Delivered++
			for _, a := range rcpts {
				r.st.Recipient[a]++
			}
			r.mu.Unlock()
			say("250 ok queued")
		case cmd == "QUIT":
			say("221 bye")
			return
		default:
			say("502 unknown command")
		}
	}
}
