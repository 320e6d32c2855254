package app

import (
	"context"
	"path/filepath"
	"time"

	"sluice/internal/confwatch"
)

// watchArmed, when a test sets it, is called once Watch's inotify watch is
// in place: a change to the file from then on is seen.
var watchArmed func()

// Watch reloads the configuration when one of its files changes (the main
// file, its include_dir's *.toml files, rule tables, the classes_file;
// confwatch.Watch), changes within settle of each other making one
// reload, until ctx ends. reload does the reload (sluice serve's also
// tells systemd, as for SIGHUP); nil is Reload, its failure logged.
func (d *Daemon) Watch(ctx context.Context, settle time.Duration, reload func()) error {
	if d.path == "" {
		return nil
	}
	if reload == nil {
		reload = func() {
			if err := d.Reload(); err != nil {
				d.log.Error("reload failed", "err", err)
			}
		}
	}
	return confwatch.Watch(ctx, confwatch.Config{Path: d.path, Files: d.configFiles, Settle: settle, Reload: reload, Armed: watchArmed, Log: d.log})
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
