// Package confwatch reloads a configuration when one of its files
// changes, through inotify (no polling): it watches the directories of the
// files, not the files (a file replaced by rename is a new inode), lets a
// burst of changes settle, calls the reload and watches the directories
// the reloaded configuration names.
package confwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Config is what Watch watches and what it calls.
type Config struct {
	// Path is the main configuration file.
	Path string
	// Files are the configuration's other files (rule tables, the
	// classes_file) and its include_dir ("" for none), read again after
	// each reload.
	Files func() (files []string, includeDir string)
	// Settle is how long changes within each other make one reload.
	Settle time.Duration
	// Reload does the reload.
	Reload func()
	// Armed, when set, is called once the inotify watch is in place: a
	// change to a file from then on is seen.
	Armed func()
	// Log takes the reloads and the directories that cannot be watched.
	Log *slog.Logger
}

// Watch calls c.Reload when one of the configuration's files changes: the
// main file, a *.toml file of its include_dir (added, written or renamed
// into place), one of its Files, wherever they are (written in place, or
// replaced by rename, as editors and config managers do), until ctx ends.
// A reload that names a new directory adds its watch.
func Watch(ctx context.Context, c Config) error {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watch %s: inotify: %w", c.Path, err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	w := &dirWatch{fd: fd, dirs: map[int32]string{}}
	if err := w.add(filepath.Dir(c.Path)); err != nil {
		return fmt.Errorf("watch %s: %w", c.Path, err)
	}
	c.watchFiles(w)
	if c.Armed != nil {
		c.Armed()
	}
	go func() {
		<-ctx.Done()
		f.SetReadDeadline(time.Now()) // wakes the read below
	}()
	rearm := func() { c.Reload(); c.watchFiles(w) } // a reload may name new directories
	changed := make(chan struct{}, 1)
	go c.reloadOnChange(ctx, changed, rearm)
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return fmt.Errorf("watch %s: %w", c.Path, err)
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			if dir, ok := w.dir(ev.Wd); ok && c.isConfigFile(dir, trimNUL(nameBytes)) {
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
func (c *Config) reloadOnChange(ctx context.Context, changed <-chan struct{}, reload func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		// Let a burst of writes finish.
		t := time.NewTimer(c.Settle)
	drain:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-changed:
				t.Reset(c.Settle)
			case <-t.C:
				break drain
			}
		}
		c.Log.Info("configuration file changed; reloading", "file", c.Path)
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

// watchFiles adds the directories of the configuration's files to w; a
// directory it cannot watch (not there yet) is logged, and its files'
// changes are seen at the next reload that finds it.
func (c *Config) watchFiles(w *dirWatch) {
	files, include := c.Files()
	dirs := []string{}
	for _, f := range files {
		dirs = append(dirs, filepath.Dir(f))
	}
	if include != "" {
		dirs = append(dirs, include)
	}
	for _, dir := range dirs {
		if err := w.add(dir); err != nil {
			c.Log.Warn("not watching a directory of the configuration; reload with SIGHUP after changing its files", "dir", dir, "err", err)
		}
	}
}

// isConfigFile says whether name in dir is a file of the configuration
// in force: the main file, a table, the classes_file, or a file its
// include_dir would merge (*.toml, not hidden).
func (c *Config) isConfigFile(dir, name string) bool {
	path := filepath.Join(dir, name)
	if path == filepath.Clean(c.Path) {
		return true
	}
	files, include := c.Files()
	if dir == include && strings.HasSuffix(name, ".toml") && !strings.HasPrefix(name, ".") {
		return true
	}
	return slices.Contains(files, path)
}
