package milter

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"sluice/internal/clock"
	"sluice/internal/milter/wire"
	"sluice/internal/netserve"
	"sluice/internal/peercred"
)

// The delayed-ACK stall (docs/protocols/milter.md, "Delayed ACK"). When the milter negotiates
// steps away, the MTA writes several reply-less packets in a row (macros,
// ABORT, the EOM sequence). The MTA does not disable Nagle, so its second
// small write waits until the first is ACKed; the milter's kernel delays
// that ACK (about 40 ms on Linux) hoping to piggyback it on a reply that
// does not come. Every message then stalls ~40 ms. The engine defeats it
// on both sides: TCP_NODELAY (Go's default, set again explicitly) and one
// Write per reply, header and payload (and at EOM every modification and
// the verdict) together, so its own replies never wait; and TCP_QUICKACK
// re-armed after every read (Linux; the flag is not sticky), so the MTA's
// writes are ACKed at once. Unix sockets have no such stall.

// rbufSize is the per-connection read buffer: a MACRO plus its command
// usually arrive in one read. Larger payloads go to a pooled buffer, so
// an idle session holds no big buffer.
const rbufSize = 512

type callKind uint8

const (
	callNone callKind = iota
	callConnect
	callHelo
	callMail
	callRcpt
	callData
	callHeader
	callEOH
	callBody
	callEOM
	callUnknown
	callAbort
	callClose
)

const (
	overloadMessage = 1 // callbacks skipped until the message ends
	overloadConn    = 2 // callbacks skipped until the connection ends
)

// errProtocol is wrapped by errors about a packet that is well formed
// but out of place.
var errProtocol = errors.New("milter: protocol error")

// conn is the state of one connection: the session's protocol state as
// data. Its goroutine reads and writes packets and, holding a worker
// token, runs the callbacks (see tryDispatch).
type conn struct {
	srv   *Server
	nc    net.Conn
	raw   syscall.RawConn // TCP on Linux: for TCP_QUICKACK
	sess  *Session
	first Session // the connection's first session (newSession)
	pid   int     // the MTA process at the other end of a unix socket (SO_PEERCRED), else 0

	version    uint32
	actions    wire.Action
	protocol   wire.Protocol
	negotiated bool
	reply      wire.OptNeg // the OPTNEG answer, encoded from here
	connected  bool        // CONNECT seen in this session
	inMessage  bool        // a message event came since the last EOM or ABORT
	overload   uint8       // overloadMessage, overloadConn

	rbuf       [rbufSize]byte
	rpos, rend int
	big        *[]byte       // pooled payload of the last packet
	readArmed  time.Duration // clock.Mono when the idle deadline was armed; 0: not armed
	inPacket   bool          // a packet's request deadline is armed
	writeArmed time.Duration // clock.Mono when the write deadline was armed; 0: not armed

	// The pending call and its result.
	call     callKind
	callSess *Session
	s1, s2   string
	args     []string
	family   Family
	port     uint16
	chunk    []byte
	mod      *Modifier
	result   Response
}

func (s *Server) serveConn(nc *netserve.Conn) {
	c := &conn{srv: s, nc: nc.Conn}
	c.pid, _ = peercred.PID(nc.Conn)
	if _, tcp := nc.Conn.RemoteAddr().(*net.TCPAddr); tcp && quickAckSupported && !s.noQuickAck {
		if sc, ok := nc.Conn.(syscall.Conn); ok { // TCP_NODELAY is set at accept
			c.raw, _ = sc.SyscallConn()
		}
	}
	c.sess = s.newSession(c)
	defer c.releaseBig()
	defer c.closeSession()
	err := c.loop()
	log := s.o.Logger
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed) && s.ctx.Err() != nil:
		log.Debug("milter: session ended", "err", err)
	case errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrTooLarge), errors.Is(err, errProtocol):
		log.Warn("milter: protocol error; closing the session", "err", err, "remote", c.nc.RemoteAddr().String())
	case errors.Is(err, os.ErrDeadlineExceeded):
		log.Info("milter: closing an idle or stalled session", "err", err, "remote", c.nc.RemoteAddr().String())
	default:
		log.Debug("milter: session ended", "err", err)
	}
}

func (s *Server) newSession(c *conn) *Session {
	ss := &c.first // made with the connection; a session after QUIT_NC is new
	if ss.c != nil {
		ss = new(Session)
	}
	ss.id, ss.c = s.nextID.Add(1), c
	return ss
}

// closeSession ends the current session, once: Abort for a message in
// progress, then Close.
func (c *conn) closeSession() {
	if c.sess == nil {
		return
	}
	c.abort()
	c.dispatchWait(callClose, c.sess)
	c.sess = nil
}

func (c *conn) loop() error {
	for {
		p, err := c.readPacket()
		if err != nil {
			return err
		}
		switch p.Code {
		case wire.CmdOptNeg:
			if err := c.negotiate(p.Data); err != nil {
				return err
			}
		case wire.CmdMacro:
			cmd, l, err := wire.DecodeMacroList(p.Data)
			if err != nil {
				return err
			}
			c.sess.setMacros(cmd, l)
		case wire.CmdAbort:
			if err := emptyPayload(p); err != nil {
				return err
			}
			c.abort()
		case wire.CmdQuit:
			return emptyPayload(p)
		case wire.CmdQuitNC:
			if err := emptyPayload(p); err != nil {
				return err
			}
			c.closeSession()
			c.sess = c.srv.newSession(c)
			c.connected, c.overload = false, 0
		case wire.CmdConnect, wire.CmdHelo, wire.CmdMail, wire.CmdRcpt, wire.CmdData,
			wire.CmdHeader, wire.CmdEOH, wire.CmdBody, wire.CmdEOM, wire.CmdUnknown:
			if !c.negotiated {
				return fmt.Errorf("%w: %v before OPTNEG", errProtocol, p.Code)
			}
			if err := c.event(p); err != nil {
				return err
			}
		default:
			// libmilter ignores unknown commands too; if the MTA waits
			// for a reply, its timeout applies its default action.
			c.srv.o.Logger.Warn("milter: unknown command ignored", "code", p.Code.String(), "len", len(p.Data))
		}
	}
}

func emptyPayload(p wire.Packet) error {
	e := wire.Empty{C: p.Code}
	return e.DecodeData(p.Data)
}

// abort ends the current message, if any.
func (c *conn) abort() {
	if c.inMessage && c.srv.steps.abort != nil {
		c.dispatchWait(callAbort, c.sess)
	}
	c.endMessage()
}

func (c *conn) endMessage() {
	c.inMessage = false
	c.sess.endMessage()
	if c.overload == overloadMessage {
		c.overload = 0
	}
}

// negotiate answers OPTNEG.
func (c *conn) negotiate(data []byte) error {
	var m wire.OptNeg
	if err := m.DecodeData(data); err != nil {
		return err
	}
	if m.Version < 2 {
		return fmt.Errorf("%w: MTA speaks protocol version %d; 2 or later needed", errProtocol, m.Version)
	}
	offered, proto := m.Actions, m.Protocol
	if offered == 0 {
		offered = wire.V1Actions
	}
	if proto == 0 {
		proto = wire.V1Protocol
	}
	o, st := &c.srv.o, &c.srv.steps
	want := o.Protocol
	off := func(implemented bool, cmd wire.Code) {
		if !implemented {
			want |= wire.NoStepFor(cmd) | wire.NoReplyFor(cmd)
		}
	}
	off(st.helo != nil, wire.CmdHelo)
	off(st.mail != nil, wire.CmdMail)
	off(st.rcpt != nil, wire.CmdRcpt)
	off(st.data != nil, wire.CmdData)
	off(st.header != nil, wire.CmdHeader)
	off(st.eoh != nil, wire.CmdEOH)
	off(st.body != nil, wire.CmdBody)
	off(st.unknown != nil, wire.CmdUnknown)
	if st.body != nil {
		want |= wire.ProtoSkip
	}
	c.version = min(m.Version, 6)
	c.actions = o.Actions & offered & wire.AllActions
	c.protocol = want & proto & wire.AllProtocol
	c.negotiated = true
	// The reply is the connection's (an interface holding a pointer into
	// it costs no allocation).
	reply := &c.reply
	*reply = wire.OptNeg{Version: c.version, Actions: c.actions, Protocol: c.protocol}
	if c.version >= 6 && c.actions&wire.ActSetSymList != 0 {
		reply.Macros = o.Macros
	}
	b := getBuf()
	out, err := wire.Encode((*b)[:0], reply)
	if err == nil {
		err = c.write(out)
	}
	putBuf(b, out)
	return err
}

// event handles a command that has a callback.
func (c *conn) event(p wire.Packet) error {
	st := &c.srv.steps
	var kind callKind
	var implemented bool
	c.s1, c.s2, c.args, c.chunk = "", "", nil, nil
	switch p.Code {
	case wire.CmdConnect:
		var m wire.Connect
		if err := m.DecodeData(p.Data); err != nil {
			return err
		}
		if c.connected {
			return fmt.Errorf("%w: a second CONNECT without QUIT_NC", errProtocol)
		}
		c.connected = true
		kind, implemented = callConnect, true
		c.s1, c.family, c.port, c.s2 = m.Host, m.Family, m.Port, m.Addr
	case wire.CmdHelo:
		var m wire.Helo
		if err := m.DecodeData(p.Data); err != nil {
			return err
		}
		kind, implemented, c.s1 = callHelo, st.helo != nil, m.Name
	case wire.CmdMail, wire.CmdRcpt:
		m := wire.Mail{Rcpt: p.Code == wire.CmdRcpt}
		if err := m.DecodeData(p.Data); err != nil {
			return err
		}
		c.s1, c.args = m.Addr, m.Args
		if m.Rcpt {
			kind, implemented = callRcpt, st.rcpt != nil
		} else {
			kind, implemented = callMail, st.mail != nil
		}
	case wire.CmdData, wire.CmdEOH:
		if err := emptyPayload(p); err != nil {
			return err
		}
		if p.Code == wire.CmdData {
			kind, implemented = callData, st.data != nil
		} else {
			kind, implemented = callEOH, st.eoh != nil
		}
	case wire.CmdHeader:
		var m wire.Header
		if err := m.DecodeData(p.Data); err != nil {
			return err
		}
		kind, implemented, c.s1, c.s2 = callHeader, st.header != nil, m.Name, m.Value
	case wire.CmdBody:
		kind, implemented, c.chunk = callBody, st.body != nil, p.Data
	case wire.CmdUnknown:
		var m wire.Unknown
		if err := m.DecodeData(p.Data); err != nil {
			return err
		}
		kind, implemented, c.s1 = callUnknown, st.unknown != nil, m.Line
	case wire.CmdEOM:
		return c.eom(p.Data)
	}
	if kind != callConnect && kind != callHelo && kind != callUnknown {
		c.inMessage = true
	}
	noReply := c.protocol&wire.NoReplyFor(p.Code) != 0
	resp := Continue
	switch {
	case c.overload != 0:
		resp = c.srv.o.QueueFullResponse
	case !implemented:
	case !c.tryDispatch(kind):
		resp = c.queueFull(kind, noReply)
	default:
		resp = c.wait()
		if resp.code == 0 || (resp.code == wire.RespSkip && (kind != callBody || c.protocol&wire.ProtoSkip == 0)) {
			resp = Continue
		}
	}
	c.chunk = nil
	if noReply {
		return nil
	}
	return c.writeResponse(resp, nil)
}

// queueFull counts a refused callback and returns the answer for it; on
// a no-reply step it marks the session to answer later.
func (c *conn) queueFull(kind callKind, noReply bool) Response {
	n := c.srv.queueFull.Add(1)
	if n&(n-1) == 0 {
		c.srv.o.Logger.Warn("milter: callback queue full; answering without the handler",
			"queue_len", c.srv.o.QueueLen, "workers", c.srv.o.Workers, "refused_total", n, "answer", c.srv.o.QueueFullResponse.String())
	}
	if noReply {
		if kind == callConnect || kind == callHelo {
			c.overload = overloadConn
		} else if c.overload == 0 {
			c.overload = overloadMessage
		}
	}
	return c.srv.o.QueueFullResponse
}

// eom handles the end of a message: an old MTA's last chunk, the EOM
// callback, then the modifications and the verdict in one write.
func (c *conn) eom(data []byte) error {
	var m wire.EOM
	if err := m.DecodeData(data); err != nil {
		return err
	}
	c.inMessage = true
	st := &c.srv.steps
	resp := Continue
	var mod *Modifier
	switch {
	case c.overload != 0:
		resp = c.srv.o.QueueFullResponse
	default:
		if len(m.Chunk) > 0 && st.body != nil {
			c.chunk = m.Chunk
			if !c.tryDispatch(callBody) {
				resp = c.queueFull(callBody, false)
				break
			}
			c.wait() // its verdict is superseded by EOM's
			c.chunk = nil
		}
		if st.eom == nil {
			break
		}
		mod = &Modifier{c: c}
		c.mod = mod
		if !c.tryDispatch(callEOM) {
			resp = c.queueFull(callEOM, false)
			break
		}
		resp = c.wait()
		if resp.code == 0 || resp.code == wire.RespSkip {
			resp = Continue
		}
	}
	c.chunk, c.mod = nil, nil
	var mods []byte
	if mod != nil {
		mods = mod.buf
	}
	err := c.writeResponse(resp, mods)
	c.endMessage()
	return err
}

// tryDispatch runs the call kind for the current session, or reports
// that the queue is full. A call runs on the connection's goroutine once
// it holds one of the Workers tokens: at most Workers callbacks run at
// once, at most QueueLen calls wait for a token, and beyond that the MTA
// is answered at once. Running the callback where the packet was read
// spares two goroutine hand-offs per event; the bound on work is the
// same as a pool of Workers goroutines behind a queue of QueueLen.
func (c *conn) tryDispatch(kind callKind) bool {
	c.call, c.callSess = kind, c.sess
	srv := c.srv
	select {
	case srv.tokens <- struct{}{}:
	default:
		if srv.waiting.Add(1) > int64(srv.o.QueueLen) {
			srv.waiting.Add(-1)
			c.call, c.callSess = callNone, nil
			return false
		}
		select {
		case srv.tokens <- struct{}{}:
			srv.waiting.Add(-1)
		case <-srv.ctx.Done():
			srv.waiting.Add(-1)
			c.call, c.callSess = callNone, nil
			return false
		}
	}
	c.runCall()
	<-srv.tokens
	return true
}

// dispatchWait runs a call that must not be dropped (Abort, Close): it
// waits for a token however many wait, and runs without one once the
// server is closing (the callbacks in flight are few and bounded then).
func (c *conn) dispatchWait(kind callKind, s *Session) {
	c.call, c.callSess = kind, s
	srv := c.srv
	token := true
	select {
	case srv.tokens <- struct{}{}: // a free token: no two-way select
	default:
		select {
		case srv.tokens <- struct{}{}:
		case <-srv.ctx.Done():
			token = false
		}
	}
	c.runCall()
	if token {
		<-srv.tokens
	}
	c.call, c.callSess = callNone, nil
}

// wait returns the result of the call tryDispatch ran.
func (c *conn) wait() Response {
	c.call, c.callSess = callNone, nil
	return c.result
}

// sendProgress writes a PROGRESS packet; a callback's Modifier calls it
// on the connection's goroutine.
func (c *conn) sendProgress() {
	b := getBuf()
	out := wire.AppendPacket((*b)[:0], wire.RespProgress, nil)
	if err := c.write(out); err != nil {
		c.srv.o.Logger.Debug("milter: writing PROGRESS failed", "err", err)
	}
	putBuf(b, out)
}

// runCall runs the pending call on the connection's goroutine; a panic in
// the handler answers tempfail.
func (c *conn) runCall() {
	defer func() {
		if r := recover(); r != nil {
			c.srv.o.Logger.Error("milter: handler panicked; answering tempfail", "panic", r, "call", int(c.call))
			c.result = Tempfail
			if c.mod != nil {
				c.mod.finish(true)
			}
		}
	}()
	h, st, s := c.srv.o.Handler, &c.srv.steps, c.callSess
	c.result = Continue
	switch c.call {
	case callConnect:
		c.result = h.Connect(s, c.s1, c.family, c.port, c.s2)
	case callHelo:
		c.result = st.helo.Helo(s, c.s1)
	case callMail:
		c.result = st.mail.MailFrom(s, c.s1, c.args)
	case callRcpt:
		c.result = st.rcpt.RcptTo(s, c.s1, c.args)
	case callData:
		c.result = st.data.Data(s)
	case callHeader:
		c.result = st.header.Header(s, c.s1, c.s2)
	case callEOH:
		c.result = st.eoh.EOH(s)
	case callBody:
		c.result = st.body.Body(s, c.chunk)
	case callEOM:
		c.result = st.eom.EOM(s, c.mod)
		c.mod.finish(false)
	case callUnknown:
		c.result = st.unknown.Unknown(s, c.s1)
	case callAbort:
		st.abort.Abort(s)
	case callClose:
		h.Close(s)
	}
}

// writeResponse writes mods (encoded modification packets) and the
// response packet in one write.
func (c *conn) writeResponse(r Response, mods []byte) error {
	if len(mods) > 0 {
		return c.write(r.append(mods)) // mods is the Modifier's own buffer
	}
	b := getBuf()
	out := r.append((*b)[:0])
	err := c.write(out)
	putBuf(b, out)
	return err
}

func (c *conn) write(b []byte) error {
	if t := c.srv.o.WriteTimeout; t > 0 {
		if now := clock.Mono(); c.writeArmed == 0 || now-c.writeArmed >= t/4 {
			c.nc.SetWriteDeadline(clock.MonoTime(now + t))
			c.writeArmed = now
		}
	}
	_, err := c.nc.Write(b)
	return err
}
