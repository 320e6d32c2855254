package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// watchArmed, when a test sets it, is called once Watch's inotify watch is
// in place: a change to the file from then on is seen.
var watchArmed func()

// Watch reloads the configuration when its file, or a rule's table in
// the same directory, changes (written in place,
// or replaced by rename, as editors and config managers do), until ctx
// ends. Changes within settle of each other make one reload. It uses
// inotify: no polling. reload does the reload (sluice serve's also tells
// systemd, as for SIGHUP); nil is Reload, its failure logged.
func (d *Daemon) Watch(ctx context.Context, settle time.Duration, reload func()) error {
	if d.path == "" {
		return nil
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watch %s: inotify: %w", d.path, err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	dir, name := filepath.Split(d.path)
	if dir == "" {
		dir = "."
	}
	// Watch the directory: a file replaced by rename is a new inode.
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CLOSE_WRITE|syscall.IN_MOVED_TO|syscall.IN_CREATE); err != nil {
		return fmt.Errorf("watch %s: %w", d.path, err)
	}
	if watchArmed != nil {
		watchArmed()
	}
	go func() {
		<-ctx.Done()
		f.SetReadDeadline(time.Now()) // wakes the read below
	}()
	if reload == nil {
		reload = func() {
			if err := d.Reload(); err != nil {
				d.log.Error("reload failed", "err", err)
			}
		}
	}
	changed := make(chan struct{}, 1)
	go d.reloadOnChange(ctx, changed, settle, reload)
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return fmt.Errorf("watch %s: %w", d.path, err)
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			if n := trimNUL(nameBytes); n == name || d.isTable(filepath.Join(dir, n)) {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}
}

func trimNUL(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// reloadOnChange reloads once changes have settled.
func (d *Daemon) reloadOnChange(ctx context.Context, changed <-chan struct{}, settle time.Duration, reload func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		// Let a burst of writes finish.
		t := time.NewTimer(settle)
	drain:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-changed:
				t.Reset(settle)
			case <-t.C:
				break drain
			}
		}
		d.log.Info("configuration file changed; reloading", "file", d.path)
		reload()
	}
}

// isTable says whether path is the table of a policy rule in force.
func (d *Daemon) isTable(path string) bool {
	cfg := d.cfg.Load()
	for _, r := range cfg.Policy.Rules {
		if r.Table != "" && filepath.Clean(cfg.Relative(r.Table)) == filepath.Clean(path) {
			return true
		}
	}
	return false
}
