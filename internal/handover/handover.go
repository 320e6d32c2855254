// Package handover is the conversation of an upgrade in place: a running
// daemon starts the executable on disk with its listening sockets (and
// any other descriptor it names) inherited, and the two processes agree,
// a line each over a socket pair, on who serves. The package owns both
// sides: the old process's (Upgrade.Run) and the new one's (TakeChild,
// Child.Take, Child.Serving); `sluice serve` (internal/cli/upgrade.go)
// and `sluice mux` (internal/muxd/upgrade.go) give it only what the steps
// mean for each, and log its events alike. docs/operations.md ("Upgrade in place: SIGUSR2") and
// docs/mux.md ("Upgrade in place: SIGUSR2") say what each step means for each.
//
// The conversation, new process first:
//
//	new -> old: take     the new process is ready to take over
//	old -> new: go       the old one has stopped (serve: its state is
//	                     written; mux: it accepts no more and its
//	                     requests in flight are answered)
//	new -> old: serving  the new process serves (and named itself where
//	                     the old one was named: systemd's main pid, the
//	                     pid file)
//	old -> new: bye      the old one exits
package handover

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/safefs"
)

// FDEnv names the descriptor of the conversation in a process started by
// an upgrade.
const FDEnv = "SLUICE_UPGRADE_FD"

// The conversation's lines (see the package comment).
const (
	lineTake    = "take"
	lineGo      = "go"
	lineServing = "serving"
	lineBye     = "bye"
)

// Wait bounds each wait of the conversation for the other side beyond
// the old process's drain: a start that reads its configuration, restores
// a snapshot of millions of keys, dials Redis or starts its first worker
// fits in it.
const Wait = 2 * time.Minute

// killAfter bounds the old process's wait for a new one that did not take
// over to end by itself before it is killed.
const killAfter = 5 * time.Second

// byeWait bounds the new process's wait for the old one's goodbye.
const byeWait = 10 * time.Second

// maxBinary caps the executable the upgrade checks before it runs it.
const maxBinary = 1 << 30

// maxLine caps a line of the conversation (bufio.ErrBufferFull beyond).
const maxLine = 64

// conn is one side of the conversation.
type conn struct {
	c net.Conn
	r *bufio.Reader
}

func newConn(f *os.File) (*conn, error) {
	c, err := net.FileConn(f) // dups the descriptor
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("hand-over socket: %w", err)
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, maxLine)}, nil
}

// send writes the line msg.
func (h *conn) send(msg string) error {
	_ = h.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := h.c.Write([]byte(msg + "\n"))
	return err
}

// expect waits up to d for the line want; the error wraps io.EOF when the
// other side is gone.
func (h *conn) expect(want string, d time.Duration) error {
	_ = h.c.SetReadDeadline(time.Now().Add(d))
	line, err := h.r.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("hand-over: waiting for %q: %w", want, err)
	}
	if got := string(line[:len(line)-1]); got != want {
		return fmt.Errorf("hand-over: got %q, want %q", got, want)
	}
	return nil
}

// close ends the conversation.
func (h *conn) close() error { return h.c.Close() }

// start starts the executable this process was started from, by the path
// it has on disk now (the upgraded binary), with the same arguments and
// argv[0] (the name it was invoked by, which may choose what it runs:
// mimedefang-multiplexor is `sluice mux`), the
// descriptors files as systemd passes sockets (from descriptor 3, named
// in LISTEN_FDNAMES, without LISTEN_PID: the pid is not known before the
// start), and one end of the conversation after them (FDEnv). It forks
// with syscall.ForkExec and the raw descriptors: os/exec's ExtraFiles
// would call File.Fd, which puts a descriptor in blocking mode, and the
// mode belongs to the socket that this process's own accept loops share:
// one blocked accept no Close can end would hold the stop for ever.
func start(files []*os.File, names []string) (*os.Process, *conn, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("the executable: %w", err)
	}
	f, err := safefs.Open(exe, maxBinary) // a regular file reached by no link another user could change
	if err != nil {
		return nil, nil, fmt.Errorf("the executable: %w", err)
	}
	f.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("hand-over socket: %w", err)
	}
	ours := os.NewFile(uintptr(pair[0]), "upgrade")
	defer unix.Close(pair[1])
	fds := []uintptr{0, 1, 2}
	for _, lf := range files {
		rc, err := lf.SyscallConn()
		if err != nil {
			ours.Close()
			return nil, nil, fmt.Errorf("descriptor %s: %w", lf.Name(), err)
		}
		if err := rc.Control(func(fd uintptr) { fds = append(fds, fd) }); err != nil {
			ours.Close()
			return nil, nil, fmt.Errorf("descriptor %s: %w", lf.Name(), err)
		}
	}
	fds = append(fds, uintptr(pair[1]))
	pid, err := syscall.ForkExec(exe, os.Args, &syscall.ProcAttr{
		Env:   env(os.Environ(), len(files), names),
		Files: fds,
	})
	if err != nil {
		ours.Close()
		return nil, nil, fmt.Errorf("start %s: %w", exe, err)
	}
	proc, _ := os.FindProcess(pid) // always succeeds on Unix
	h, err := newConn(ours)
	if err != nil {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, nil, err
	}
	return proc, h, nil
}

// env is the new process's environment: the descriptors announced as
// systemd announces sockets, the conversation's descriptor after them,
// and nothing else of the kind inherited.
func env(env []string, n int, names []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", FDEnv, "SLUICE_LISTEN_FDS":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LISTEN_FDS="+strconv.Itoa(n), "LISTEN_FDNAMES="+strings.Join(names, ":"),
		FDEnv+"="+strconv.Itoa(3+n))
}

// exited reports, once, how the started process p ended: its wait status,
// or the wait's error (a reaper of its own, as the multiplexor's with -E,
// may have taken the status).
func exited(p *os.Process) <-chan string {
	ch := make(chan string, 1)
	go func() {
		st, err := p.Wait()
		if err != nil {
			ch <- err.Error()
			return
		}
		ch <- st.String()
	}()
	return ch
}
