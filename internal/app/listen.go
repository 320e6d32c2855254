package app

import (
	"fmt"
	"io/fs"
	"net"
	"os/user"
	"path/filepath"
	"strconv"

	"sluice/internal/config"
	"sluice/internal/safefs"
	"sluice/internal/sdlisten"
)

// sources are where a listener may already exist: the sockets the root
// phase handed across its exec (taken in binding order), then those
// systemd passed.
type sources struct {
	handoff *sdlisten.Handoff
	systemd *sdlisten.Sockets
}

// listen binds one configured address, or takes the socket the root
// phase or systemd passed for it (fromSystemd: its owner and mode are the
// socket unit's). A unix socket sluice binds gets the configured mode and
// owner; a stale socket file left by a dead process is replaced, one that
// a live server answers on is an error. A unix socket an upgrade passed
// that sluice bound gets them too, as far as this process may change them
// (adopt); those it may not are returned in unapplied.
func listen(cfg *config.Config, src sources, spec string, sock config.Socket, mode uint32) (l net.Listener, fromSystemd bool, unapplied []safefs.SocketChange, err error) {
	network, addr, err := config.ParseListen(spec)
	if err != nil {
		return nil, false, nil, err
	}
	if network == "unix" {
		addr = cfg.Path(addr)
	}
	l, fromSystemd, ok, err := src.handoff.Next(network, addr)
	if err != nil {
		return nil, false, nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	if ok {
		return l, fromSystemd, nil, nil
	}
	if l, ours, ok := src.systemd.Claim(network, addr); ok {
		if ours && network == "unix" {
			unapplied = adopt(addr, sock, mode)
		}
		return l, !ours, unapplied, nil
	}
	l, err = bindNew(spec, network, addr, sock, mode)
	return l, false, nil, err
}

// adopt gives the unix socket at addr that an upgrade passed, bound by
// sluice under the old configuration, the owner, group and mode sock
// asks for now, as far as this process may change them; it returns those
// it could not. A socket it cannot even look at (a directory its user
// may not search, as Postfix's private/) is one change with no Setting.
func adopt(addr string, sock config.Socket, mode uint32) []safefs.SocketChange {
	owner, err := socketOwner(sock)
	if err == nil {
		var failed []safefs.SocketChange
		if failed, err = safefs.AdjustSocket(addr, owner, fs.FileMode(mode)); err == nil {
			return failed
		}
	}
	return []safefs.SocketChange{{Err: err}}
}

// bindNew binds a new socket. A unix socket's directory is made if
// missing and its owner and mode set through safefs, which follows no
// path another user can change.
func bindNew(spec, network, addr string, sock config.Socket, mode uint32) (net.Listener, error) {
	if network != "unix" {
		l, err := net.Listen(network, addr)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", spec, err)
		}
		return l, nil
	}
	owner, err := socketOwner(sock)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	dir, _, err := safefs.MkdirAll(filepath.Dir(addr), config.RuntimeDirMode)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	dir.Close()
	l, err := safefs.ListenUnix(addr, owner, fs.FileMode(mode))
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	return l, nil
}

// socketOwner resolves a socket table's owner and group (-1: unset).
func socketOwner(sock config.Socket) (safefs.Owner, error) {
	o := safefs.Owner{UID: -1, GID: -1}
	if sock.Owner != "" {
		u, err := user.Lookup(sock.Owner)
		if err != nil {
			return o, fmt.Errorf("socket owner: %w", err)
		}
		o.UID, _ = strconv.Atoi(u.Uid)
	}
	if sock.Group != "" {
		g, err := user.LookupGroup(sock.Group)
		if err != nil {
			return o, fmt.Errorf("socket group: %w", err)
		}
		o.GID, _ = strconv.Atoi(g.Gid)
	}
	return o, nil
}
