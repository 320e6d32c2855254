// Command muxgofloor is the floor of bench/mux.sh written the way a Go
// program is usually written, to tell the cost of the Go runtime's
// scheduling from the cost of sluice's pool: a goroutine per connection
// (net.Listener and net.Conn on the runtime's poller), the workers' pipes
// as *os.File, and no owner goroutine. An idle worker is a value in a
// buffered channel; a request takes one (waiting in the channel's FIFO of
// receivers while all are busy, which is the queue), writes its line, reads
// the reply line, gives the worker back (straight to the longest waiting
// request, if any) and writes the reply. status is answered from the
// number of idle workers. No limits, timeouts, recycling, logging or
// statistics.
//
// It takes sluice mux's command line as bench/mux.sh passes it (only -s,
// the socket, -f, the worker program, -x, the number of workers, and -I,
// the listen backlog, a quarter of -x but at least 5 by default as in the
// multiplexors, are used; the rest is ignored), so that it can stand in for a sluice binary:
//
//	go build -o /tmp/muxgofloor ./bench/muxgofloor
//	BASELINE=/tmp/muxgofloor COMMANDS=relayok CONCURRENCY=64 bench/mux.sh
//
// (the "baseline" target is then this floor). It runs as the user that
// starts it, workers included.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sluice/bench/internal/floorcmd"
	"strings"
	"syscall"
)

type worker struct {
	stdin  *os.File
	stdout *os.File
	buf    []byte
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "muxgofloor:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	a, err := floorcmd.Parse("muxgofloor", args)
	if err != nil {
		return err
	}
	sock, prog, n, backlog := a.Socket, a.Program, a.Workers, a.Backlog
	idle := make(chan *worker, n)
	for range n {
		w, err := startWorker(prog)
		if err != nil {
			return err
		}
		idle <- w
	}
	l, err := listen(sock, backlog)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		l.Close()
	}()
	return serveAll(l, idle, n)
}

// serveAll serves l's connections until it is closed.
func serveAll(l net.Listener, idle chan *worker, n int) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			continue
		}
		go serve(c, idle, n)
	}
}

// listen listens on the unix socket path with the given backlog (net.Listen
// would take the system's maximum).
func listen(path string, backlog int) (net.Listener, error) {
	_ = os.Remove(path)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // FileListener dups it
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		return nil, fmt.Errorf("bind %s: %w", path, err)
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return l, nil
}

func startWorker(prog string) (*worker, error) {
	in, out, err := floorcmd.StartWorker(prog)
	if err != nil {
		return nil, err
	}
	return &worker{stdin: in, stdout: out, buf: make([]byte, 4096)}, nil
}

// serve answers one connection: its request line, then close.
func serve(c net.Conn, idle chan *worker, n int) {
	defer c.Close()
	var b [4096]byte
	got := 0
	for got < len(b) && bytes.IndexByte(b[:got], '\n') < 0 {
		m, err := c.Read(b[got:])
		got += m
		if err != nil {
			return
		}
	}
	line := b[:got]
	if string(bytes.TrimRight(line, "\r\n")) == "status" {
		free := len(idle)
		_, _ = c.Write([]byte(strings.Repeat("I", free) + strings.Repeat("B", n-free) + " 0 0 0 0\n"))
		return
	}
	w := <-idle
	reply, ok := w.exchange(line)
	idle <- w
	if ok {
		_, _ = c.Write(reply)
	}
}

// exchange writes line to the worker and reads one reply line.
func (w *worker) exchange(line []byte) ([]byte, bool) {
	if _, err := w.stdin.Write(line); err != nil {
		return nil, false
	}
	got := 0
	for {
		m, err := w.stdout.Read(w.buf[got:])
		got += m
		if i := bytes.IndexByte(w.buf[:got], '\n'); i >= 0 {
			return bytes.Clone(w.buf[:i+1]), true
		}
		if err != nil || got == len(w.buf) {
			return nil, false
		}
	}
}
