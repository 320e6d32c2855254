package handover

import (
	"log/slog"
	"os"
	"time"
)

// Upgrade is the old process's side of an upgrade: what it hands over and
// what the steps of the conversation mean for it.
type Upgrade struct {
	Log *slog.Logger
	// Self and New name this process and the new one in the log lines
	// ("daemon" and "process" for serve, "multiplexor" for both in mux).
	Self, New string
	// Files are the descriptors passed, each named in Names (the new
	// process finds them as systemd's sockets, LISTEN_FDNAMES); they stay
	// the caller's to close.
	Files []*os.File
	Names []string
	// TakeWait is how long the new process may take beyond Wait before
	// it says take (the multiplexor's: a worker's busy timeout).
	TakeWait time.Duration
	// Stop stops serving once the new process is ready: serve shuts down
	// as for SIGTERM and writes its state; mux stops accepting and
	// answers what it accepted.
	Stop func()
	// Served is called with the new process's pid once it serves, before
	// the goodbye (serve names it systemd's main pid); nil for nothing.
	Served func(pid int)
}

// Result is how an upgrade ended.
type Result int

const (
	// Kept: the upgrade failed before Stop; this process still serves.
	Kept Result = iota
	// Handed: the new process serves; this one exits.
	Handed
	// Stopped: the upgrade failed after Stop; the caller serves the Files
	// again.
	Stopped
)

// Run starts the executable on disk with u.Files and speaks the
// conversation: it waits for take (a new process that does not say it is
// killed once killAfter has passed without its exit), calls Stop, says go,
// waits for serving, calls Served and says bye. Each outcome is logged
// with why.
func (u *Upgrade) Run() Result {
	log := u.Log
	child, h, err := start(u.Files, u.Names)
	if err != nil {
		log.Error("upgrade failed; still serving", "err", err)
		return Kept
	}
	defer h.close()
	ended := exited(child)
	log.Info("upgrade: started the new "+u.New+"; serving until it takes over", "pid", child.Pid)
	if err := h.expect(lineTake, Wait+u.TakeWait); err != nil {
		var exit string
		select {
		case exit = <-ended: // it ended by itself; its own log lines say why
		case <-time.After(killAfter):
			_ = child.Kill()
			exit = <-ended
		}
		log.Error("upgrade failed: the new "+u.New+" did not take over; still serving (its own log lines say why)",
			"pid", child.Pid, "err", err, "exit", exit)
		return Kept
	}
	log.Info("upgrade: the new "+u.New+" takes over; stopping", "pid", child.Pid)
	u.Stop()
	if err = h.send(lineGo); err == nil {
		if err = h.expect(lineServing, Wait); err == nil {
			if u.Served != nil {
				u.Served(child.Pid)
			}
			_ = h.send(lineBye)
			log.Info("upgrade: the new "+u.New+" serves; exiting", "pid", child.Pid)
			return Handed
		}
	}
	_ = child.Kill()
	log.Error("upgrade failed after this "+u.Self+" stopped; serving again on the same sockets",
		"pid", child.Pid, "err", err, "exit", <-ended)
	return Stopped
}

// CloseFiles closes every file of fs.
func CloseFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
