package mux

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"sluice/internal/dropq"
	"sluice/internal/pool"
)

// statsBufSize is the stdio buffer the reference's stats file gets (a
// regular file's block size): without -u, lines reach the file when it
// fills, at SIGHUP and at exit.
const statsBufSize = 4096

// statsQueue bounds the lines waiting for the writer; beyond it lines are
// dropped (and counted) rather than holding up the pool.
const statsQueue = 4096

// StatsOptions configure a StatsLog.
type StatsOptions struct {
	// Path is -t ("" for none: lines go only to Syslog).
	Path string
	// Flush is -u: flush after every line.
	Flush bool
	// Syslog is -T: it gets "stats <line without its date>" for every
	// line (nil: none). It is called by Event, on the pool's owner, so
	// that the lines come in the order of the pool's own log lines, as
	// the reference writes them; it must not block (the syslog client
	// queues).
	Syslog func(msg string)
	// Logger gets the file's open, write and stall errors (default
	// slog.Default()).
	Logger *slog.Logger
	// Location is the time zone of the date (nil: time.Local).
	Location *time.Location
}

// StatsLog is the stats file (docs/protocols/mimedefang-multiplexor.md, "Stats file"). Event formats a line and hands it to
// a writer goroutine (and to Syslog at once), so a slow or full disk never blocks the pool: write
// errors are logged (once until writing works again) and the lines lost.
type StatsLog struct {
	o StatsOptions
	q *dropq.Queue[statsMsg]
}

type statsMsg struct {
	line   string
	reopen bool
	ack    chan struct{} // reopen: closed once the file is reopened
}

// OpenStats opens o.Path in append mode (a failure is logged, and the
// file is tried again at each Reopen) and starts the writer.
func OpenStats(o StatsOptions) *StatsLog {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	w := &statsWriter{o: o}
	w.open()
	return &StatsLog{o: o, q: dropq.Start(statsQueue, w.run)}
}

// FormatStatsLine is the stats line for ev (docs/protocols/mimedefang-multiplexor.md, "Stats file"):
// "DD/MM/YYYY:HH:MM:SS <epoch>.<ms> <Event> worker=<n> nworkers=<r> nbusy=<b>[ <extra>]",
// in loc, cut to 1023 bytes as the reference's buffer does.
func FormatStatsLine(ev pool.StatsEvent, loc *time.Location) string {
	t := ev.Time.In(loc)
	line := fmt.Sprintf("%s %d.%03d %s worker=%d nworkers=%d nbusy=%d",
		t.Format("02/01/2006:15:04:05"), t.Unix(), t.Nanosecond()/1e6, ev.Event, ev.Worker, ev.Running, ev.Busy)
	if ev.Extra != "" {
		line += " " + ev.Extra
	}
	return truncateStr(line, 1023)
}

func truncateStr(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Event logs one event; it never blocks (pool.Config.Stats).
func (s *StatsLog) Event(ev pool.StatsEvent) {
	line := FormatStatsLine(ev, s.o.Location)
	if s.o.Syslog != nil && len(line) >= 20 {
		// The date is always "dd/mm/YYYY:hh:mm:ss " (20 bytes).
		s.o.Syslog("stats " + line[20:])
	}
	if s.o.Path != "" {
		s.send(statsMsg{line: line})
	}
}

func (s *StatsLog) send(m statsMsg) bool {
	ok, first := s.q.Put(m)
	if first {
		s.o.Logger.Error("stats file: the writer is stuck; dropping stats lines")
	}
	return ok
}

// Reopen closes and reopens the file (SIGHUP, for log rotation), after
// the lines already logged are written; it waits for that.
func (s *StatsLog) Reopen() {
	ack := make(chan struct{})
	if s.send(statsMsg{reopen: true, ack: ack}) {
		<-ack
	}
}

// Close writes what is pending, flushes and closes the file.
func (s *StatsLog) Close() error {
	s.q.Close()
	return nil
}

// run is the writer goroutine: it writes the lines and reopens the file
// as the messages come, and closes the file at the end.
func (w *statsWriter) run(msgs <-chan statsMsg) {
	for m := range msgs {
		if m.reopen {
			w.close()
			w.open()
			close(m.ack)
			continue
		}
		w.write(m.line)
	}
	w.close()
}

// statsWriter is owned by the writer goroutine.
type statsWriter struct {
	o      StatsOptions
	f      *os.File
	bw     *bufio.Writer
	failed bool // a write failed and has not succeeded since
}

func (w *statsWriter) open() {
	if w.o.Path == "" {
		return
	}
	f, err := os.OpenFile(w.o.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		w.o.Logger.Error(fmt.Sprintf("Could not open stats file %s: %s", w.o.Path, errnoText(err)))
		return
	}
	w.f = f
	w.bw = bufio.NewWriterSize(f, statsBufSize)
}

func (w *statsWriter) close() {
	if w.f == nil {
		return
	}
	w.check(w.bw.Flush())
	if err := w.f.Close(); err != nil {
		w.o.Logger.Error(fmt.Sprintf("Failed to close stats file: %s", errnoText(err)))
	}
	w.f, w.bw = nil, nil
}

func (w *statsWriter) write(line string) {
	if w.bw != nil {
		_, err := w.bw.WriteString(line + "\n")
		if err == nil && w.o.Flush {
			err = w.bw.Flush()
		}
		w.check(err)
	}
}

// check logs the first write error of a run of them and starts a fresh
// buffer (a bufio.Writer keeps failing once it failed); what was buffered
// is lost.
func (w *statsWriter) check(err error) {
	if err == nil {
		if w.failed {
			w.failed = false
			w.o.Logger.Warn("stats file: writing works again", "file", w.o.Path)
		}
		return
	}
	if !w.failed {
		w.failed = true
		w.o.Logger.Error(fmt.Sprintf("Error writing stats file %s: %s", w.o.Path, errnoText(err)))
	}
	w.bw = bufio.NewWriterSize(w.f, statsBufSize)
}

// errnoText is strerror's text for err's errno (capitalized), else
// err's own text.
func errnoText(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		if s := en.Error(); s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return err.Error()
}
