package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"

	"sluice/internal/handover"
	"sluice/internal/safefs"
	"sluice/internal/sdlisten"
)

// HandOverListeners returns a duplicate of every listening socket, in
// binding order, each named by its door (with sdlisten.SystemdSuffix when
// systemd passed it: its path and settings are the socket unit's), for a
// process that takes them over (an upgrade: the new process is given
// them as systemd gives its sockets), and makes the daemon leave the unix
// sockets' paths in place when it closes its own copies: they are the
// new process's now.
func (d *Daemon) HandOverListeners() ([]*os.File, []string, error) {
	var files []*os.File
	var names []string
	for _, bl := range d.listeners {
		l := bl.l
		if g, ok := l.(*gatedListener); ok {
			l = g.Listener
		}
		fl, ok := l.(interface{ File() (*os.File, error) })
		if !ok {
			handover.CloseFiles(files)
			return nil, nil, fmt.Errorf("%s listener %s: no descriptor to hand over", bl.door, bl.spec)
		}
		f, err := fl.File()
		if err != nil {
			handover.CloseFiles(files)
			return nil, nil, fmt.Errorf("%s listener %s: %w", bl.door, bl.spec, err)
		}
		name := bl.door
		if bl.fromSystemd {
			name += sdlisten.SystemdSuffix
		}
		files, names = append(files, f), append(names, name)
	}
	for _, bl := range d.listeners {
		l := bl.l
		if g, ok := l.(*gatedListener); ok {
			l = g.Listener
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
	}
	return files, names, nil
}

// logUnapplied logs, one line each, the settings of the socket spec of
// door that an upgrade passed and that this process could not apply: they
// apply only after a restart (docs/operations.md, "Upgrade in place: SIGUSR2").
func (d *Daemon) logUnapplied(door, spec string, unapplied []safefs.SocketChange) {
	for _, u := range unapplied {
		if u.Setting == "" {
			level := slog.LevelWarn
			if errors.Is(u.Err, fs.ErrPermission) {
				level = slog.LevelInfo // expected where the socket's directory is another user's
			}
			d.log.Log(context.Background(), level, "upgrade: cannot check the owner, group and mode of a socket taken over; a change of them applies only after a restart",
				"setting", socketSetting(door, "*"), "listen", spec, "err", u.Err)
			continue
		}
		d.log.Warn("upgrade: a setting of a socket taken over applies only after a restart",
			"setting", socketSetting(door, u.Setting), "listen", spec, "err", u.Err)
	}
}

// socketSetting is the configuration key of a socket setting of door
// ("owner", "group", "mode"; "*" for all three), as a log line names it.
func socketSetting(door, setting string) string {
	if setting == "*" {
		if door == "control" {
			return "control.admin_group"
		}
		return door + ".socket"
	}
	if door == "control" { // its group is the admin group; its owner and mode are sluice's
		if setting == "group" {
			return "control.admin_group"
		}
		return "control.socket (" + setting + ")"
	}
	return door + ".socket." + setting
}

// dropUnnamed closes the sockets an upgrade passed that sluice bound and
// the configuration no longer names (a unix socket's path is removed),
// and refuses those systemd passed that no listen address names.
func (d *Daemon) dropUnnamed() error {
	for _, s := range d.src.systemd.CloseOurs() {
		d.log.Info("upgrade: closed a socket the configuration no longer names", "socket", s)
	}
	if left := d.src.systemd.Unclaimed(); len(left) > 0 {
		return unclaimedError(left)
	}
	return nil
}
