package muxd

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/handover"
	"sluice/internal/pool"
)

// An upgrade in place (docs/mux.md, "Upgrade in place: SIGUSR2"): on SIGUSR2 the
// multiplexor starts the executable on disk with its listening sockets,
// its pid file and its lock file (named "main", "restricted", "map",
// "notify", "web", "pid", "lock"), and they speak package handover's
// conversation: the new process starts its pool, has a worker answer,
// accepts, and says take; the old one stops accepting, answers what it
// accepted before, and says go; the new one writes its pid into the pid
// file and says serving; the old one says bye and exits, leaving the
// files and the sockets' paths in place. The lock is an open file
// description lock, which the new process holds through the descriptor it
// was given: it is never released in between.

// upgradeChild takes the conversation and the descriptors an upgrade
// passed, if this process was started by one; it returns an error text,
// or "". The variables are unset: the workers inherit the environment.
func (d *daemon) upgradeChild() string {
	up, err := handover.TakeChild("multiplexor")
	if err != nil {
		return err.Error()
	}
	if up == nil {
		return ""
	}
	passed := map[string]*os.File{}
	for i, name := range up.Names {
		if passed[name] != nil {
			handover.CloseFiles(up.Files)
			up.Close()
			return fmt.Sprintf("upgrade: descriptors named %q passed", up.Names)
		}
		passed[name] = up.Files[i]
	}
	d.up, d.keepFiles, d.passed = up, true, passed
	d.pid = d.passed["pid"] // written once the old process has stopped (takeOver)
	delete(d.passed, "pid")
	return ""
}

// passedOr is the descriptor an upgrade passed under name, or open's.
func (d *daemon) passedOr(name string, open func() (*os.File, error)) (*os.File, error) {
	if f := d.passed[name]; f != nil {
		delete(d.passed, name)
		return f, nil
	}
	return open()
}

// passedListener is the listening socket an upgrade passed under name,
// or listen's.
func (d *daemon) passedListener(name string, listen func() (net.Listener, error)) (net.Listener, error) {
	f := d.passed[name]
	if f == nil {
		return listen()
	}
	delete(d.passed, name)
	defer f.Close()
	return net.FileListener(f) // a unix socket's path is not removed when it closes
}

// lockFile takes the whole-file write lock on the lock file f: an open
// file description lock, which conflicts with the reference's fcntl lock
// as with another sluice's, and which an upgrade hands over with the
// descriptor (taking it again on the same description succeeds).
func lockFile(f *os.File) error {
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK})
}

// writePid writes "<pid>\n" into the pid file without a moment in which
// it is empty: over what is there (a longer old content is first
// overwritten with the line and newlines, which every reader takes for
// the same pid), then cut to the line.
func writePid(f *os.File) {
	line := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if fi, err := f.Stat(); err == nil && fi.Size() > int64(len(line)) && fi.Size() <= 64 {
		padded := make([]byte, fi.Size())
		copy(padded, line)
		for i := len(line); i < len(padded); i++ {
			padded[i] = '\n'
		}
		_, _ = f.WriteAt(padded, 0)
	} else if err != nil || fi.Size() > 64 {
		_ = f.Truncate(0)
	}
	_, _ = f.WriteAt(line, 0)
	_ = f.Truncate(int64(len(line)))
}

// poolAnswers is the new process's check before it serves: one worker
// answers a ping (any reply line will do) within the busy timeout.
func (r *running) poolAnswers() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.d.o.Busy)
	defer cancel()
	res := r.pool.Do(ctx, pool.Request{Line: "ping", Queue: true})
	if res.Err != nil {
		return fmt.Errorf("ping: %w", res.Err)
	}
	return nil
}

// takeOver is the new process's side once it serves: take, then, when
// the old one has stopped, the pid file is this process's, and serving.
func (r *running) takeOver() {
	d, up := r.d, r.d.up
	d.up = nil
	for name, f := range d.passed { // handed over, not used here
		f.Close()
		delete(d.passed, name)
	}
	up.Take(r.log, r.drainTime())
	if d.pid != nil {
		writePid(d.pid)
	}
	d.keepFiles = false
	if r.web != nil {
		r.web.keepPath = false
	}
	up.Serving(r.log)
	r.log.Info("upgrade: serving", "version", d.o.Version, "pid", os.Getpid())
}

// drainTime bounds the old process's wait for its requests in flight: a
// worker's busy timeout after the longest a request may queue.
func (r *running) drainTime() time.Duration {
	return r.d.o.QueueTimeout + r.d.o.Busy + r.d.o.Cmd
}

// upgrade is SIGUSR2 on the old process: it returns true once the new
// process serves (this one then stops without removing anything), false
// when the upgrade failed and this one still serves (package handover
// logs each outcome with why).
func (r *running) upgrade() bool {
	files, names, sockets, err := r.handOverFiles()
	if err != nil {
		r.log.Error("upgrade failed; still serving", "err", err)
		return false
	}
	defer handover.CloseFiles(files[:sockets])
	u := &handover.Upgrade{Log: r.log, Self: "multiplexor", New: "multiplexor", Files: files, Names: names, TakeWait: r.d.o.Busy,
		Stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), r.drainTime())
			if err := r.srv.Drain(ctx); err != nil {
				r.log.Warn("upgrade: requests still in flight; they are closed", "waited", r.drainTime(), "err", err)
			}
			cancel()
			r.d.keepFiles = true
			if r.web != nil {
				r.web.handedOver(true)
			}
		}}
	switch u.Run() {
	case handover.Handed:
		r.upgraded = true
		return true
	case handover.Stopped:
		r.d.keepFiles = false
		if r.web != nil {
			r.web.handedOver(false)
		}
		r.resume(files, names)
	}
	return false
}

// handOverFiles is a duplicate of every listening socket (the first
// sockets files), then the pid and lock files' descriptors, each with its
// name.
func (r *running) handOverFiles() (files []*os.File, names []string, sockets int, err error) {
	add := func(name string, ln net.Listener) error {
		fl, ok := ln.(interface{ File() (*os.File, error) })
		if !ok {
			return fmt.Errorf("the %s socket has no descriptor to hand over", name)
		}
		f, err := fl.File()
		if err != nil {
			return fmt.Errorf("the %s socket: %w", name, err)
		}
		files, names = append(files, f), append(names, name)
		return nil
	}
	lns := map[string]net.Listener{"map": r.mapLn, "notify": r.notifyLn}
	for _, l := range r.listeners {
		if l.privileged {
			lns["main"] = l.ln
		} else {
			lns["restricted"] = l.ln
		}
	}
	if r.web != nil {
		lns["web"] = r.web.ln
	}
	for _, name := range []string{"main", "restricted", "map", "notify", "web"} {
		if ln := lns[name]; ln != nil {
			if err := add(name, ln); err != nil {
				handover.CloseFiles(files)
				return nil, nil, 0, err
			}
		}
	}
	sockets = len(files)
	for _, own := range []struct {
		name string
		f    *os.File
	}{{"pid", r.d.pid}, {"lock", r.d.lock}} {
		if own.f != nil {
			files, names = append(files, own.f), append(names, own.name)
		}
	}
	return files, names, sockets, nil
}

// resume serves the main and -a sockets again after an upgrade that
// failed once this process had stopped accepting: a new mux.Server on the
// sockets handed over (the drained one closed its copies).
func (r *running) resume(files []*os.File, names []string) {
	r.srv.Close()
	for range r.listeners {
		<-r.serveDone
	}
	for i := range r.listeners {
		name := "restricted"
		if r.listeners[i].privileged {
			name = "main"
		}
		for j, n := range names {
			if n != name {
				continue
			}
			ln, err := net.FileListener(files[j])
			if err != nil {
				r.log.Error("upgrade: cannot serve the socket again", "socket", name, "err", err)
				continue
			}
			r.listeners[i].ln = ln
		}
	}
	r.serveListeners()
}
