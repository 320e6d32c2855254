package cli

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"time"

	"sluice/internal/app"
	"sluice/internal/handover"
	"sluice/internal/sdlisten"
)

// takeOver tells the old daemon that this one is ready and waits until
// it has stopped (drain, state written). If the old one is gone, there
// is nothing to wait for.
func takeOver(h *handover.Conn, grace time.Duration, log *slog.Logger) {
	if err := h.Send(handover.Take); err != nil {
		log.Warn("upgrade: the old daemon is gone; starting", "err", err)
		return
	}
	log.Info("upgrade: waiting for the old daemon to finish its sessions and write its state")
	if err := h.Expect(handover.Go, grace+handover.Wait); err != nil {
		log.Warn("upgrade: the old daemon did not say it stopped; starting", "err", err)
	}
}

// tookOver tells the old daemon that this one serves, and waits for its
// goodbye (it tells systemd the new main pid first).
func tookOver(h *handover.Conn, log *slog.Logger) {
	defer h.Close()
	if err := h.Send(handover.Serving); err == nil {
		if err := h.Expect(handover.Bye, 10*time.Second); err != nil {
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
	child, h, err := handover.Start(files, names)
	if err != nil {
		log.Error("upgrade failed; still serving", "err", err)
		return false, nil, false
	}
	exited := handover.Exited(child)
	defer h.Close()
	if err := h.Expect(handover.Take, handover.Wait); err != nil {
		var exit string
		select {
		case exit = <-exited: // it ended by itself; its own log lines say why
		case <-time.After(5 * time.Second):
			_ = child.Kill()
			exit = <-exited
		}
		log.Error("upgrade failed: the new process did not take over; still serving (its own log lines say why)", "pid", child.Pid, "err", err, "exit", exit)
		return false, nil, false
	}
	log.Info("upgrade: the new process takes over; stopping as for SIGTERM", "pid", child.Pid, "grace", s.grace)
	_ = s.sd.Stopping()
	ctx, cancel := context.WithTimeout(context.Background(), s.grace)
	_ = d.Shutdown(ctx)
	cancel()
	if err := h.Send(handover.Go); err == nil {
		err = h.Expect(handover.Serving, handover.Wait)
		if err == nil {
			_ = s.sd.Send("MAINPID="+strconv.Itoa(child.Pid), "READY=1", "STATUS=serving (upgraded)")
			_ = h.Send(handover.Bye)
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

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
