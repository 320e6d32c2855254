package cli

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/app"
	"sluice/internal/safefs"
	"sluice/internal/sdlisten"
)

// upgradeFDEnv names the descriptor of the hand-over conversation in a
// process started by an upgrade.
const upgradeFDEnv = "SLUICE_UPGRADE_FD"

// The hand-over conversation between the old daemon and the new one, a
// line each, over a socket pair:
//
//	new -> old: take     its configuration is read and valid
//	old -> new: go       the old daemon has stopped; its state is written
//	new -> old: serving  the new daemon serves every listener
//	old -> new: bye      the old one told systemd the new main pid; it exits
const (
	msgTake    = "take"
	msgGo      = "go"
	msgServing = "serving"
	msgBye     = "bye"
)

// upgradeWait bounds each wait of the conversation for the other side,
// beyond the old daemon's drain: a start that reads its configuration,
// restores a snapshot of millions of keys or dials Redis fits in it.
const upgradeWait = 2 * time.Minute

// maxBinary caps the executable the upgrade checks before it runs it.
const maxBinary = 1 << 30

// handConn is one side of the hand-over conversation.
type handConn struct {
	c net.Conn
	r *bufio.Reader
}

func newHandConn(f *os.File) (*handConn, error) {
	c, err := net.FileConn(f) // dups the descriptor
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("hand-over socket: %w", err)
	}
	return &handConn{c: c, r: bufio.NewReaderSize(c, 64)}, nil
}

func (h *handConn) send(msg string) error {
	_ = h.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := h.c.Write([]byte(msg + "\n"))
	return err
}

// expect waits up to d for the line want; io.EOF when the other side is
// gone. A line is at most 64 bytes (bufio.ErrBufferFull beyond).
func (h *handConn) expect(want string, d time.Duration) error {
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

func (h *handConn) Close() error { return h.c.Close() }

// upgradeChild returns the conversation with the old daemon when this
// process was started by an upgrade, or nil. The variable is unset, so
// that nothing this process starts takes it for its own.
func upgradeChild() (*handConn, error) {
	v, ok := os.LookupEnv(upgradeFDEnv)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(upgradeFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not a descriptor", upgradeFDEnv, v)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("%s=%d: %w", upgradeFDEnv, fd, err)
	}
	unix.CloseOnExec(fd)
	return newHandConn(os.NewFile(uintptr(fd), "upgrade"))
}

// takeOver tells the old daemon that this one is ready and waits until
// it has stopped (drain, state written). If the old one is gone, there
// is nothing to wait for.
func takeOver(h *handConn, grace time.Duration, log *slog.Logger) {
	if err := h.send(msgTake); err != nil {
		log.Warn("upgrade: the old daemon is gone; starting", "err", err)
		return
	}
	log.Info("upgrade: waiting for the old daemon to finish its sessions and write its state")
	if err := h.expect(msgGo, grace+upgradeWait); err != nil {
		log.Warn("upgrade: the old daemon did not say it stopped; starting", "err", err)
	}
}

// tookOver tells the old daemon that this one serves, and waits for its
// goodbye (it tells systemd the new main pid first).
func tookOver(h *handConn, log *slog.Logger) {
	defer h.Close()
	if err := h.send(msgServing); err == nil {
		if err := h.expect(msgBye, 10*time.Second); err != nil {
			log.Warn("upgrade: the old daemon did not say goodbye", "err", err)
		}
	}
}

// upgrade starts the executable on disk as the new daemon, with every
// listening socket of d, and hands over to it: once the new process has
// read its configuration, d stops as for SIGTERM (staged: its sessions
// end, its state is written), then the new one starts serving. It
// returns done when the new daemon serves (the caller exits); a failure
// before d stopped leaves d serving (resumed nil, done false); a failure
// after it (the new process died while starting) starts a daemon again
// in this process on the same sockets (resumed), so that the listeners
// are served whatever happens; should that fail too, lost is set and the
// caller exits 1 for the service manager to start it again. Each outcome
// is logged.
func upgrade(d *app.Daemon, s *serveState) (done bool, resumed *app.Daemon, lost bool) {
	log := s.log
	files, names, err := d.HandOverListeners()
	if err != nil {
		log.Error("upgrade failed; still serving", "err", err)
		return false, nil, false
	}
	defer closeFiles(files)
	child, h, err := startNew(files, names)
	if err != nil {
		log.Error("upgrade failed; still serving", "err", err)
		return false, nil, false
	}
	exited := make(chan string, 1)
	go func() {
		st, err := child.Wait()
		if err != nil {
			exited <- err.Error()
			return
		}
		exited <- st.String()
	}()
	defer h.Close()
	if err := h.expect(msgTake, upgradeWait); err != nil {
		select {
		case st := <-exited: // it ended by itself; its own log lines say why
			exited <- st
		case <-time.After(5 * time.Second):
			_ = child.Kill()
		}
		log.Error("upgrade failed: the new process did not take over; still serving (its own log lines say why)", "pid", child.Pid, "err", err, "exit", <-exited)
		return false, nil, false
	}
	log.Info("upgrade: the new process takes over; stopping as for SIGTERM", "pid", child.Pid, "grace", s.grace)
	_ = s.sd.Stopping()
	ctx, cancel := context.WithTimeout(context.Background(), s.grace)
	_ = d.Shutdown(ctx)
	cancel()
	if err := h.send(msgGo); err == nil {
		err = h.expect(msgServing, upgradeWait)
		if err == nil {
			_ = s.sd.Send("MAINPID="+strconv.Itoa(child.Pid), "READY=1", "STATUS=serving (upgraded)")
			_ = h.send(msgBye)
			log.Info("upgrade: the new process serves; exiting", "pid", child.Pid)
			return true, nil, false
		}
		log.Error("upgrade failed: the new process did not start serving", "pid", child.Pid, "err", err)
	}
	_ = child.Kill()
	log.Error("upgrade failed after this daemon stopped; starting again on the same sockets", "exit", <-exited)
	socks, err := sdlisten.FromFiles(files, names)
	if err != nil {
		log.Error("cannot take the sockets back; exiting", "err", err)
		return false, nil, true
	}
	nd, err := app.New(s.cfg, s.path, log, s.level, app.WithSockets(socks), app.WithStateDir(s.stateDir))
	if err != nil {
		log.Error("cannot start again; exiting", "err", err)
		return false, nil, true
	}
	return false, nd, false
}

// startNew starts the executable this process was started from, by the
// path it has on disk now (the upgraded binary), with the same
// arguments, the listening sockets as systemd passes them, and one end
// of the hand-over conversation. It forks with syscall.ForkExec and the
// raw descriptors: os/exec's ExtraFiles would call File.Fd, which puts a
// descriptor in blocking mode, and the mode belongs to the socket that
// this daemon's own accept loops share: one blocked accept no Close can
// end would hold the stop for ever.
func startNew(files []*os.File, names []string) (*os.Process, *handConn, error) {
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
			return nil, nil, fmt.Errorf("socket %s: %w", lf.Name(), err)
		}
		if err := rc.Control(func(fd uintptr) { fds = append(fds, fd) }); err != nil {
			ours.Close()
			return nil, nil, fmt.Errorf("socket %s: %w", lf.Name(), err)
		}
	}
	fds = append(fds, uintptr(pair[1]))
	pid, err := syscall.ForkExec(exe, append([]string{exe}, os.Args[1:]...), &syscall.ProcAttr{
		Env:   upgradeEnv(os.Environ(), len(files), names),
		Files: fds,
	})
	if err != nil {
		ours.Close()
		return nil, nil, fmt.Errorf("start %s: %w", exe, err)
	}
	proc, _ := os.FindProcess(pid) // always succeeds on Unix
	h, err := newHandConn(ours)
	if err != nil {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, nil, err
	}
	return proc, h, nil
}

// upgradeEnv is env for the new process: the sockets announced as
// systemd announces them (from descriptor 3, without LISTEN_PID: the pid
// is not known before the start), the conversation's descriptor after
// them, and nothing else of the kind inherited.
func upgradeEnv(env []string, n int, names []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", upgradeFDEnv, "SLUICE_LISTEN_FDS":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LISTEN_FDS="+strconv.Itoa(n), "LISTEN_FDNAMES="+strings.Join(names, ":"),
		upgradeFDEnv+"="+strconv.Itoa(3+n))
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
