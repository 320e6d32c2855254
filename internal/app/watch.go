package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// watchArmed, when a test sets it, is called once Watch's inotify watch is
// in place: a change to the file from then on is seen.
var watchArmed func()

// Watch reloads the configuration when one of its files changes: the
// main file, a *.toml file of its include_dir (added, written or renamed
// into place), a rule's table or the classes_file, wherever they are
// (written in place, or replaced by rename, as editors and config
// managers do), until ctx ends. The directories are watched, not the
// files (a file replaced by rename is a new inode); a reload that names
// a new directory adds its watch. Changes within settle of each other make one reload. It uses
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
	w := &dirWatch{fd: fd, dirs: map[int32]string{}}
	if err := w.add(filepath.Dir(d.path)); err != nil {
		return fmt.Errorf("watch %s: %w", d.path, err)
	}
	d.watchFiles(w)
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
	rearm := func() { reload(); d.watchFiles(w) } // a reload may name new directories
	changed := make(chan struct{}, 1)
	go d.reloadOnChange(ctx, changed, settle, rearm)
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
			if dir, ok := w.dir(ev.Wd); ok && d.isConfigFile(dir, trimNUL(nameBytes)) {
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

// dirWatch is Watch's inotify descriptor and the directories it
// watches, by watch descriptor.
type dirWatch struct {
	fd   int
	mu   sync.Mutex
	dirs map[int32]string
}

// add watches dir (again: inotify gives the same descriptor).
func (w *dirWatch) add(dir string) error {
	dir = filepath.Clean(dir)
	wd, err := syscall.InotifyAddWatch(w.fd, dir, syscall.IN_CLOSE_WRITE|syscall.IN_MOVED_TO|syscall.IN_CREATE|syscall.IN_DELETE|syscall.IN_MOVED_FROM)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.dirs[int32(wd)] = dir
	w.mu.Unlock()
	return nil
}

// dir is the directory of watch descriptor wd.
func (w *dirWatch) dir(wd int32) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	dir, ok := w.dirs[wd]
	return dir, ok
}

// configFiles are the files of the configuration in force besides the
// main one: rule tables and the classes_file; and its include_dir ("" for
// none).
func (d *Daemon) configFiles() (files []string, includeDir string) {
	cfg := d.cfg.Load()
	for _, r := range cfg.Policy.Rules {
		if r.Table != "" {
			files = append(files, filepath.Clean(cfg.Relative(r.Table)))
		}
	}
	if cfg.ClassesFile != "" {
		files = append(files, filepath.Clean(cfg.Relative(cfg.ClassesFile)))
	}
	if cfg.IncludeDir != "" {
		includeDir = filepath.Clean(cfg.Relative(cfg.IncludeDir))
	}
	return files, includeDir
}

// watchFiles adds the directories of the configuration's files to w; a
// directory it cannot watch (not there yet) is logged, and its files'
// changes are seen at the next reload that finds it.
func (d *Daemon) watchFiles(w *dirWatch) {
	files, include := d.configFiles()
	dirs := []string{}
	for _, f := range files {
		dirs = append(dirs, filepath.Dir(f))
	}
	if include != "" {
		dirs = append(dirs, include)
	}
	for _, dir := range dirs {
		if err := w.add(dir); err != nil {
			d.log.Warn("not watching a directory of the configuration; reload with SIGHUP after changing its files", "dir", dir, "err", err)
		}
	}
}

// isConfigFile says whether name in dir is a file of the configuration
// in force: the main file, a table, the classes_file, or a file its
// include_dir would merge (*.toml, not hidden).
func (d *Daemon) isConfigFile(dir, name string) bool {
	path := filepath.Join(dir, name)
	if path == filepath.Clean(d.path) {
		return true
	}
	files, include := d.configFiles()
	if dir == include && strings.HasSuffix(name, ".toml") && !strings.HasPrefix(name, ".") {
		return true
	}
	return slices.Contains(files, path)
}
