package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"sluice/internal/config"
	"sluice/internal/sdlisten"
)

// listen binds one configured address, or claims the socket systemd
// passed for it (inherited true; its owner and mode are the socket
// unit's). A unix socket sluice binds gets the configured mode and owner;
// a stale socket file left by a dead process is replaced, one that a live
// server answers on is an error.
func listen(cfg *config.Config, sockets *sdlisten.Sockets, spec string, sock config.Socket, mode uint32) (l net.Listener, inherited bool, err error) {
	network, addr, err := config.ParseListen(spec)
	if err != nil {
		return nil, false, err
	}
	if network == "unix" {
		addr = cfg.Path(addr)
	}
	if l, ok := sockets.Claim(network, addr); ok {
		return l, true, nil
	}
	l, err = bindNew(cfg, spec, network, addr, sock, mode)
	return l, false, err
}

func bindNew(cfg *config.Config, spec, network, addr string, sock config.Socket, mode uint32) (net.Listener, error) {
	if network != "unix" {
		l, err := net.Listen(network, addr)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", spec, err)
		}
		return l, nil
	}
	path := addr
	if err := os.MkdirAll(filepath.Dir(path), config.RuntimeDirMode); err != nil {
		return nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	if err := removeStale(path); err != nil {
		return nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	// Bind with no permissions at all, then open up to the configured
	// mode, so the socket is never reachable with looser ones.
	old := syscall.Umask(0o777)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(true)
	if err := chown(path, sock); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen %s: %w", spec, err)
	}
	if err := os.Chmod(path, os.FileMode(mode)); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen %s: chmod: %w", spec, err)
	}
	return l, nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by a running server", path)
	}
	return os.Remove(path)
}

func chown(path string, sock config.Socket) error {
	uid, gid := -1, -1
	if sock.Owner != "" {
		u, err := user.Lookup(sock.Owner)
		if err != nil {
			return fmt.Errorf("socket owner: %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
	}
	if sock.Group != "" {
		g, err := user.LookupGroup(sock.Group)
		if err != nil {
			return fmt.Errorf("socket group: %w", err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if uid == -1 && gid == -1 {
		return nil
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("chown socket: %w", err)
	}
	return nil
}
