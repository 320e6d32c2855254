package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

// runSessions drives full milter sessions against -socket for -duration
// from -c clients, as an MTA would: connect, negotiate (version 6,
// everything offered), CONNECT, HELO, -messages messages (MAIL, RCPT,
// DATA, headers, body, EOM), QUIT. Client i uses the address
// 10.x.y.z of i modulo -clients, so the class and rate limits see many
// peers. It prints one line,
//
//	c=<c> sessions=<n> messages=<m> sessions_per_s=<r> tempfail=<t> reject=<j> errors=<e>
//
// where tempfail and reject count sessions the milter refused (a full
// class or a rate rule: answers, not failures) and errors are transport or
// protocol failures. It exits 1 when errors > 0.
func runSessions(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("milterload sessions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the milter's unix socket (required)")
	c := fs.Int("c", 8, "concurrent sessions")
	clients := fs.Int("clients", 1000, "distinct client addresses")
	messages := fs.Int("messages", 2, "messages per session")
	duration := fs.Duration("duration", 10*time.Second, "how long to run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || *c < 1 || *clients < 1 || *messages < 0 || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "milterload sessions: -socket is required; -c and -clients at least 1")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var sessions, msgs, tempfail, reject, errs atomic.Int64
	var lastErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i += *c {
				n, verdict, err := session(*socket, i%*clients, *messages)
				msgs.Add(int64(n))
				switch {
				case err != nil:
					errs.Add(1)
					lastErr.Store(err)
				case verdict == wire.RespTempfail || verdict == wire.RespReplyCode:
					tempfail.Add(1)
				case verdict == wire.RespReject:
					reject.Add(1)
				default:
					sessions.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "c=%d sessions=%d messages=%d sessions_per_s=%.1f tempfail=%d reject=%d errors=%d\n",
		*c, sessions.Load(), msgs.Load(), float64(sessions.Load()+tempfail.Load()+reject.Load())/el, tempfail.Load(), reject.Load(), errs.Load())
	if errs.Load() > 0 {
		fmt.Fprintf(stderr, "milterload sessions: last error: %v\n", lastErr.Load())
		return 1
	}
	return 0
}

// session runs one SMTP session's milter conversation for client i and
// returns the messages accepted and the verdict that ended it early
// (RespContinue when none did).
func session(socket string, i, messages int) (int, wire.Code, error) {
	m, err := miltest.Dial("unix", socket)
	if err != nil {
		return 0, 0, err
	}
	defer m.Close()
	_ = m.Conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		return 0, 0, fmt.Errorf("negotiate: %w", err)
	}
	addr := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	steps := []wire.Msg{
		&wire.Connect{Host: "[" + addr + "]", Family: wire.FamilyInet, Port: uint16(1024 + i%60000), Addr: addr},
		&wire.Helo{Name: "client.example"},
	}
	for _, s := range steps {
		if m.Neg.Protocol&wire.NoStepFor(s.Code()) != 0 {
			continue
		}
		r, err := m.Command(s)
		if err != nil {
			return 0, 0, fmt.Errorf("%v: %w", s.Code(), err)
		}
		if r != nil && r.Code() != wire.RespContinue {
			return 0, r.Code(), m.Quit()
		}
	}
	n := 0
	for range messages {
		_, final, err := m.Message("sender@example.org", "rcpt@example.net",
			[]string{"From", "sender@example.org", "Subject", "soak"}, "Hello.\r\n")
		if err != nil {
			return n, 0, fmt.Errorf("message: %w", err)
		}
		if final != nil && final.Code() != wire.RespContinue && final.Code() != wire.RespAccept {
			return n, final.Code(), m.Quit()
		}
		n++
	}
	return n, wire.RespContinue, m.Quit()
}
