// Package syslog sends log records to the local syslog daemon, as
// openlog(3) with LOG_PID does, without ever blocking the caller: the
// daemons' log (sluice serve with [log] output = "syslog") and the mux's
// (-l, -S, -Y, -T, as the reference multiplexor logs).
//
// Go's log/syslog is frozen and blocks on a stuck daemon; this client
// queues, drops beyond a bound, and falls back to stderr where there is no
// syslog socket (as in many containers).
package syslog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"sluice/internal/dropq"
)

// DefaultPath is the local syslog socket.
const DefaultPath = "/dev/log"

// syslogQueue bounds the messages waiting for the syslog writer; beyond it
// messages are dropped rather than holding up the pool.
const syslogQueue = 1024

// Facilities is the syslog facility code for each name (without "LOG_",
// lower-case).
var Facilities = map[string]int{
	"kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6, "news": 7,
	"uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11,
	"local0": 16, "local1": 17, "local2": 18, "local3": 19, "local4": 20, "local5": 21, "local6": 22, "local7": 23,
}

// FacilityCode is the code of a facility name ("mail", "LOG_MAIL", any
// case).
func FacilityCode(name string) (int, bool) {
	c, ok := Facilities[strings.TrimPrefix(strings.ToLower(name), "log_")]
	return c, ok
}

// Options configure a Client.
type Options struct {
	// Path is the datagram socket (default /dev/log; tests use their own).
	Path string
	// Tag is the ident (default "sluice") and Facility the facility code
	// (0 is kern; callers pass Facilities["mail"] or their own).
	Tag      string
	Facility int
	// Fallback gets the messages, one line each, when Path cannot be
	// reached at start, and those that cannot be sent later (default
	// os.Stderr).
	Fallback io.Writer
	// PID is shown after the tag, as LOG_PID does (default os.Getpid()).
	PID int
}

// Client sends log messages to the local syslog daemon as openlog(3) with
// LOG_PID does: "<PRI>Mmm dd hh:mm:ss tag[pid]: message". A writer
// goroutine does the sending, so logging never blocks; a send that fails
// is retried once on a fresh connection. When the socket cannot be
// reached at start (no /dev/log, as in many containers), messages go to
// Fallback and one notice says so; a message that cannot be sent later
// (the daemon gone) goes there too, after one notice per outage.
type Client struct {
	o        Options
	q        *dropq.Queue[string]
	conn     net.Conn // writer goroutine only
	fallback bool
	down     bool // writer goroutine only: a send failed, and none has worked since
}

// Reachable reports why the syslog socket path cannot take a message, or
// nil when it can ("" is DefaultPath).
func Reachable(path string) error {
	if path == "" {
		path = DefaultPath
	}
	c, err := net.Dial("unixgram", path)
	if err != nil {
		return err
	}
	return c.Close()
}

// Open connects to o.Path, or falls back as described on Client.
func Open(o Options) *Client {
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if o.Tag == "" {
		o.Tag = "sluice"
	}
	if o.Fallback == nil {
		o.Fallback = os.Stderr
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	s := &Client{o: o}
	c, err := net.Dial("unixgram", o.Path)
	if err != nil {
		s.fallback = true
		fmt.Fprintf(o.Fallback, "%s: cannot reach syslog at %s (%v); logging to stderr\n", o.Tag, o.Path, err)
	} else {
		s.conn = c
	}
	s.q = dropq.Start(syslogQueue, s.run)
	return s
}

// Fallback reports whether messages go to the fallback writer.
func (s *Client) Fallback() bool { return s.fallback }

// Log sends msg at severity sev (0 emerg ... 7 debug); it never blocks.
// A msg with a control character (or invalid UTF-8) is sent quoted and
// escaped as strconv.Quote writes it.
func (s *Client) Log(sev int, msg string) {
	msg = quoteUnsafe(msg)
	now := time.Now()
	var line string
	if s.fallback {
		line = fmt.Sprintf("%s %s[%d]: %s\n", now.Format(time.Stamp), s.o.Tag, s.o.PID, msg)
	} else {
		line = fmt.Sprintf("<%d>%s %s[%d]: %s", s.o.Facility<<3|sev, now.Format(time.Stamp), s.o.Tag, s.o.PID, msg)
	}
	s.q.Put(line)
}

func (s *Client) run(lines <-chan string) {
	for line := range lines {
		if s.fallback {
			_, _ = io.WriteString(s.o.Fallback, line)
			continue
		}
		err := s.send(line)
		if err != nil {
			// The daemon may have restarted: once more on a new socket.
			if s.conn != nil {
				s.conn.Close()
				s.conn = nil
			}
			var c net.Conn
			if c, err = net.Dial("unixgram", s.o.Path); err == nil {
				s.conn = c
				err = s.send(line)
			}
		}
		s.sent(line, err)
	}
	if s.conn != nil {
		s.conn.Close()
	}
}

// sent takes the outcome of sending line: a line that could not be sent
// goes to Fallback (without its "<PRI>"), after a notice when it is the
// first since syslog last took one.
func (s *Client) sent(line string, err error) {
	if err == nil {
		s.down = false
		return
	}
	if !s.down {
		s.down = true
		fmt.Fprintf(s.o.Fallback, "%s: cannot send to syslog at %s (%v); logging to stderr until it answers\n", s.o.Tag, s.o.Path, err)
	}
	_, _ = io.WriteString(s.o.Fallback, line[strings.IndexByte(line, '>')+1:]+"\n")
}

func (s *Client) send(line string) error {
	if s.conn == nil {
		return net.ErrClosed
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := s.conn.Write([]byte(line))
	return err
}

// Close sends what is queued and closes the socket.
func (s *Client) Close() error {
	s.q.Close()
	return nil
}

// Handler is a slog.Handler that logs through s: the message, then the
// attributes as slog's TextHandler writes them (" key=value", a value
// with a space, '=', a quote or a control character quoted and escaped
// as strconv.Quote does), so that a value a peer chose (a sender, a HELO
// name) stays one value and brings no control character to syslog; a
// message with a control character is quoted the same way. Debug, Info,
// Warn and Error map to the severities debug, info, warning and err.
// Records below level are dropped.
func (s *Client) Handler(level slog.Leveler) slog.Handler {
	f := &formatter{}
	return &syslogHandler{s: s, level: level, f: f, text: slog.NewTextHandler(f, nil)}
}

type syslogHandler struct {
	s     *Client
	level slog.Leveler
	f     *formatter
	text  slog.Handler // writes to f, with the attributes and groups given
}

// formatter is the buffer the TextHandlers of one Handler (and those
// WithAttrs and WithGroup made from it) write a record to.
type formatter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (f *formatter) Write(p []byte) (int, error) { return f.buf.Write(p) }

func (h *syslogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *syslogHandler) Handle(ctx context.Context, r slog.Record) error {
	// The record without its time, message and source: TextHandler writes
	// level=LEVEL msg="" and then the attributes alone.
	msg := r.Message
	r.Time, r.Message, r.PC = time.Time{}, "", 0
	prefix := "level=" + r.Level.String() + ` msg=""`
	h.f.mu.Lock()
	h.f.buf.Reset()
	err := h.text.Handle(ctx, r)
	attrs := strings.TrimSuffix(strings.TrimPrefix(h.f.buf.String(), prefix), "\n")
	h.f.mu.Unlock()
	if err != nil {
		return err
	}
	sev := 6
	switch {
	case r.Level >= slog.LevelError:
		sev = 3
	case r.Level >= slog.LevelWarn:
		sev = 4
	case r.Level < slog.LevelInfo:
		sev = 7
	}
	h.s.Log(sev, quoteUnsafe(msg)+attrs)
	return nil
}

func (h *syslogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.text = h.text.WithAttrs(as)
	return &c
}

func (h *syslogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.text = h.text.WithGroup(name)
	return &c
}

// quoteUnsafe is s, or s quoted as strconv.Quote (and so TextHandler)
// quotes it when it has a control character, a rune that is not
// printable or invalid UTF-8: nothing below 0x20, no DEL, no C1 control
// reaches syslog, and a line stays one line.
func quoteUnsafe(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
