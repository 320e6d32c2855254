package sendmailtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/internal/testutil/smtptest"
)

// Session timeouts.
const (
	// defaultSMTPTimeout bounds each SMTP exchange when the context given
	// to SMTPSession has no deadline (a guard against a hung test).
	defaultSMTPTimeout = 30 * time.Second
	acceptTimeout      = 10 * time.Second
	closeQuitWait      = 2 * time.Second // for writing QUIT
	closeExitWait      = 5 * time.Second
)

// Reply is one SMTP reply, possibly multi-line.
type Reply = smtptest.Reply

// Session is one SMTP session with its own "sendmail -bs" process: the
// test side of a TCP connection whose other end is sendmail's stdin and
// stdout. It is not safe for concurrent use, except that Close may be
// called at any time (Instance.Stop does).
type Session struct {
	inst   *Instance
	conn   *net.TCPConn
	r      *bufio.Reader
	client netip.AddrPort
	server netip.AddrPort

	pid     int
	netns   string
	stderr  *smtptest.Buffer
	done    chan struct{} // closed when sendmail has exited and been reaped
	waitErr error         // valid after done is closed

	deadline time.Time // zero: defaultSMTPTimeout per exchange
	greeted  bool
	greeting Reply

	closeOnce sync.Once
	closeErr  error
}

// SMTPSession starts one SMTP session from clientAddr, a loopback address
// (127.0.0.0/8 or ::1; "" means 127.0.0.1): it connects a TCP socket from
// clientAddr to a one-off listener on 127.0.0.1 (or ::1) and runs
// "sendmail -bs" on the accepted end, so Sendmail, and through it the
// milter, sees a TCP client at clientAddr. It returns once sendmail runs,
// without reading the greeting (Sendmail greets only after the milter has
// answered CONNECT): see Greeting. If ctx has a deadline, it also bounds
// every later exchange of the session. Close the session when done;
// Instance.Stop closes any left open.
func (i *Instance) SMTPSession(ctx context.Context, clientAddr string) (*Session, error) {
	if clientAddr == "" {
		clientAddr = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(clientAddr)
	if err != nil || !ip.IsLoopback() || ip.Zone() != "" {
		return nil, fmt.Errorf("sendmailtest: client address %q is not a loopback address (127.0.0.0/8 or ::1)", clientAddr)
	}
	i.mu.Lock()
	stopped := i.stopped
	i.mu.Unlock()
	if stopped {
		return nil, errors.New("sendmailtest: instance stopped")
	}

	listenAddr := "127.0.0.1:0"
	if ip.Is6() && !ip.Is4In6() {
		listenAddr = "[::1]:0"
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for the session's socket: %w", err)
	}
	defer ln.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip.Unmap().AsSlice()}}
	nc, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("connect from %s: %w", ip, err)
	}
	conn := nc.(*net.TCPConn)
	srv, err := acceptFrom(ctx, ln.(*net.TCPListener), conn.LocalAddr().String())
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	// sendmail gets a blocking duplicate of the accepted socket as fd 0
	// and 1, as inetd would pass it.
	f, err := srv.File()
	_ = srv.Close()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("socket for sendmail: %w", err)
	}
	defer f.Close()

	s := &Session{
		inst:   i,
		conn:   conn,
		r:      bufio.NewReader(conn),
		client: conn.LocalAddr().(*net.TCPAddr).AddrPort(),
		server: conn.RemoteAddr().(*net.TCPAddr).AddrPort(),
		stderr: &smtptest.Buffer{Limit: 64 << 10},
		done:   make(chan struct{}),
	}
	if dl, ok := ctx.Deadline(); ok {
		s.deadline = dl
	}
	// -X: SMTP transcript; -D/-d64.10: milter debug output to a file
	// (by default it would go to stdout, the SMTP channel).
	cmd := i.nsCommand(i.tree.sendmail, "-C", i.cfPath(), "-bs", "-X", i.tracePath(), "-D", i.debugPath(), "-d64.10")
	cmd.Stdin = f
	cmd.Stdout = f
	cmd.Stderr = s.stderr
	i.mu.Lock()
	if i.stopped {
		i.mu.Unlock()
		_ = conn.Close()
		return nil, errors.New("sendmailtest: instance stopped")
	}
	if err := cmd.Start(); err != nil {
		i.mu.Unlock()
		_ = conn.Close()
		return nil, fmt.Errorf("start sendmail -bs: %w", err)
	}
	s.pid = cmd.Process.Pid
	// Start returns after the exec, so the process is in its new
	// network namespace already.
	if ns, err := netNS(s.pid); err == nil {
		s.netns = ns
		i.netns[ns] = true
	}
	i.sessions[s] = struct{}{}
	i.mu.Unlock()
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	i.logf("sendmailtest: session from %s: sendmail -bs pid %d", s.client, s.pid)
	return s, nil
}

// acceptFrom accepts the connection whose remote address is from, closing
// any other (a stranger on the loopback port).
func acceptFrom(ctx context.Context, ln *net.TCPListener, from string) (*net.TCPConn, error) {
	dl := time.Now().Add(acceptTimeout)
	if ctxDL, ok := ctx.Deadline(); ok && ctxDL.Before(dl) {
		dl = ctxDL
	}
	if err := ln.SetDeadline(dl); err != nil {
		return nil, fmt.Errorf("accept the session's socket: %w", err)
	}
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return nil, fmt.Errorf("accept the session's socket: %w", err)
		}
		if c.RemoteAddr().String() == from {
			return c, nil
		}
		_ = c.Close()
	}
}

// Pid returns the pid of the session's sendmail process.
func (s *Session) Pid() int { return s.pid }

// ClientAddr returns the client's address and port: what the milter's
// CONNECT carries.
func (s *Session) ClientAddr() netip.AddrPort { return s.client }

// Greeting reads and returns Sendmail's greeting (all lines of it); later
// calls return the same reply. Sendmail greets only after the milter
// answered CONNECT: "220 ..." when admitted, "421 4.7.0 <Hostname>
// closing connection" (and a hang-up) when the milter replied 421 or
// SHUTDOWN, "554 ..." when it rejected.
func (s *Session) Greeting() (Reply, error) {
	if s.greeted {
		return s.greeting, nil
	}
	r, err := s.ReadReply()
	if err != nil {
		return Reply{}, fmt.Errorf("read greeting: %w", err)
	}
	return r, nil
}

// ReadReply reads the next reply; the first one read is the greeting. An
// error wraps io.EOF when Sendmail has hung up, and tells how sendmail
// exited if it has.
func (s *Session) ReadReply() (Reply, error) {
	s.setDeadline()
	r, err := smtptest.ReadReply(s.r)
	if err != nil {
		return Reply{}, fmt.Errorf("read smtp reply: %w%s", err, s.exitInfo())
	}
	if !s.greeted {
		s.greeted, s.greeting = true, r
	}
	return r, nil
}

// Cmd sends one command line (without CRLF) and reads the full reply. It
// reads the greeting first if that has not been read: Sendmail rejects a
// client that talks before the greeting.
func (s *Session) Cmd(line string) (Reply, error) {
	if !s.greeted {
		if _, err := s.Greeting(); err != nil {
			return Reply{}, err
		}
	}
	if err := s.Send(line); err != nil {
		return Reply{}, err
	}
	r, err := s.ReadReply()
	if err != nil {
		return Reply{}, fmt.Errorf("smtp %s: %w", verb(line), err)
	}
	return r, nil
}

// Send writes one line plus CRLF without reading a reply: for message
// text after DATA, or to test pipelining.
func (s *Session) Send(line string) error {
	if strings.ContainsAny(line, "\r\n") {
		return fmt.Errorf("smtp line %q contains a line break", line)
	}
	s.setDeadline()
	if _, err := s.conn.Write([]byte(line + "\r\n")); err != nil {
		return fmt.Errorf("send smtp %q: %w%s", verb(line), err, s.exitInfo())
	}
	return nil
}

// SendMessage sends one small message in the session: MAIL FROM, RCPT TO,
// DATA and a short text. A reply other than 250, 250 and 354, then 250, is
// an error that includes the reply. The message stays in the instance's
// queue.
func (s *Session) SendMessage(from, to string) error {
	steps := []struct {
		line string
		want int
	}{
		{"MAIL FROM:<" + from + ">", 250},
		{"RCPT TO:<" + to + ">", 250},
		{"DATA", 354},
	}
	for _, st := range steps {
		r, err := s.Cmd(st.line)
		if err != nil {
			return err
		}
		if r.Code != st.want {
			return fmt.Errorf("smtp %s: reply %s, want %d", verb(st.line), r, st.want)
		}
	}
	for _, line := range []string{
		"From: <" + from + ">",
		"To: <" + to + ">",
		"Subject: sendmailtest",
		"Message-ID: <" + strconv.FormatInt(time.Now().UnixNano(), 36) + "@sendmailtest.invalid>",
		"",
		"Test message from sluice sendmailtest.",
		"..A line that starts with a (stuffed) dot.",
		".",
	} {
		if err := s.Send(line); err != nil {
			return err
		}
	}
	r, err := s.ReadReply()
	if err != nil {
		return fmt.Errorf("end of DATA: %w", err)
	}
	if r.Code != 250 {
		return fmt.Errorf("end of DATA: reply %s, want 250", r)
	}
	return nil
}

// Wait waits until the session's sendmail has exited (after QUIT, or after
// it hung up on the client) or ctx ends. It returns nil for exit status
// 0, else the *exec.ExitError or the context's error.
func (s *Session) Wait(ctx context.Context) error {
	select {
	case <-s.done:
		return s.waitErr
	case <-ctx.Done():
		return fmt.Errorf("wait for sendmail pid %d: %w", s.pid, ctx.Err())
	}
}

// Stderr returns what sendmail (and the namespace set-up before it)
// wrote to stderr.
func (s *Session) Stderr() string { return s.stderr.String() }

// Close sends QUIT if sendmail still runs and shuts down the sending side
// of the connection, waits for sendmail to exit, kills it (and anything
// left in its namespace) if it does not within a few seconds, and closes
// the connection. It is idempotent.
func (s *Session) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Session) close() error {
	defer func() {
		s.inst.mu.Lock()
		delete(s.inst.sessions, s)
		s.inst.mu.Unlock()
	}()
	// QUIT, then half-close: sendmail answers and exits, or sees EOF and
	// exits. The reply is not read, so that Close does not race with a
	// ReadReply still blocked in another goroutine.
	select {
	case <-s.done:
	default:
		_ = s.conn.SetWriteDeadline(time.Now().Add(closeQuitWait))
		_, _ = s.conn.Write([]byte("QUIT\r\n"))
		_ = s.conn.CloseWrite()
	}
	defer s.conn.Close()
	var errs []error
	select {
	case <-s.done:
	case <-time.After(closeExitWait):
		s.inst.logf("sendmailtest: sendmail pid %d still runs %v after its client hung up; killing it", s.pid, closeExitWait)
		// Not reaped yet, so the pid and its process group are still
		// this session's.
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(closeExitWait):
			errs = append(errs, fmt.Errorf("sendmailtest: sendmail pid %d did not exit after SIGKILL", s.pid))
		}
	}
	if s.netns != "" {
		if err := killLeftovers(map[string]bool{s.netns: true}, s.inst.logf); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// exitInfo describes sendmail's exit for error messages, or says nothing
// while it runs.
func (s *Session) exitInfo() string {
	select {
	case <-s.done:
	case <-time.After(100 * time.Millisecond):
		return ""
	}
	status := "exit status 0"
	if s.waitErr != nil {
		status = s.waitErr.Error()
	}
	msg := fmt.Sprintf(" (sendmail pid %d exited: %s", s.pid, status)
	if e := strings.TrimSpace(s.stderr.String()); e != "" {
		msg += "; stderr: " + tail(e, 10)
	}
	return msg + ")"
}

func (s *Session) setDeadline() {
	dl := s.deadline
	if dl.IsZero() {
		dl = time.Now().Add(defaultSMTPTimeout)
	}
	_ = s.conn.SetDeadline(dl)
}

// verb returns the command word of line, for error messages.
func verb(line string) string {
	if v, _, ok := strings.Cut(line, " "); ok {
		return v
	}
	return line
}
