package muxd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// listener is one bound client socket.
type listener struct {
	ln         net.Listener
	privileged bool
	unlink     string // removed at exit
}

// bind creates the -s socket and, with -a, the unprivileged one; on
// failure it returns the reference's error text, with nothing left bound.
func (d *daemon) bind() ([]listener, string) {
	mainAddr, err := parseSocket(d.o.Socket, false)
	if err != nil {
		return nil, err.Error()
	}
	mainLn, err := d.passedListener("main", func() (net.Listener, error) {
		return listen(mainAddr, d.o.Backlog, d.sockMask(), d.fileMask())
	})
	if err != nil {
		return nil, fmt.Sprintf("Unable to create listening socket %s: %s", d.o.Socket, errnoText(err))
	}
	listeners := []listener{{mainLn, true, mainAddr.path}}
	if d.o.Restricted == "" {
		return listeners, ""
	}
	a, err := parseSocket(d.o.Restricted, true)
	var ln net.Listener
	if err == nil {
		ln, err = d.passedListener("restricted", func() (net.Listener, error) { return listen(a, d.o.Backlog, 0, d.fileMask()) })
	}
	if err != nil {
		mainLn.Close()
		if !d.keepFiles {
			_ = os.Remove(mainAddr.path)
		}
		return nil, fmt.Sprintf("Unable to create unprivileged listening socket %s: %s", d.o.Restricted, errnoText(err))
	}
	unlink := ""
	if strings.HasPrefix(a.path, "/") {
		unlink = a.path
	}
	return append(listeners, listener{ln, false, unlink}), ""
}

// addr is a parsed socket argument (docs/protocols/mimedefang-multiplexor.md, "Framing").
type addr struct {
	network string // "unix", "tcp4" or "tcp6"
	path    string
	ip      net.IP
	port    int
}

// parseSocket reads a socket argument: a path, unix:PATH or
// local:PATH, and (with inet) inet:PORT (127.0.0.1), inet_any:PORT,
// inet6:PORT (::1) and inet6_any:PORT. Anything else is a path.
func parseSocket(s string, inet bool) (addr, error) {
	if !inet && strings.HasPrefix(s, "inet") {
		return addr{}, refText("Argument to -s option must be a UNIX-domain socket, not a TCP socket.")
	}
	for _, p := range []string{"unix:", "local:"} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return addr{network: "unix", path: rest}, nil
		}
	}
	for _, f := range []struct {
		prefix, network string
		ip              net.IP
	}{
		{"inet:", "tcp4", net.IPv4(127, 0, 0, 1)},
		{"inet_any:", "tcp4", net.IPv4zero},
		{"inet6:", "tcp6", net.IPv6loopback},
		{"inet6_any:", "tcp6", net.IPv6unspecified},
	} {
		if rest, ok := strings.CutPrefix(s, f.prefix); ok {
			port, err := strconv.Atoi(rest)
			if err != nil || port < 1 || port > 65535 {
				return addr{}, fmt.Errorf("bad port in %q", s)
			}
			return addr{network: f.network, ip: f.ip, port: port}, nil
		}
	}
	return addr{network: "unix", path: s}, nil
}

// listen creates a listening socket with the given backlog; a unix
// socket replaces any file at its path and is created under sockMask
// (the process umask is fileMask again afterwards).
func listen(a addr, backlog, sockMask, fileMask int) (net.Listener, error) {
	var domain int
	var sa syscall.Sockaddr
	switch a.network {
	case "unix":
		domain = syscall.AF_UNIX
		sa = &syscall.SockaddrUnix{Name: a.path}
		if err := os.Remove(a.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	case "tcp4":
		domain = syscall.AF_INET
		s4 := &syscall.SockaddrInet4{Port: a.port}
		copy(s4.Addr[:], a.ip.To4())
		sa = s4
	default:
		domain = syscall.AF_INET6
		s6 := &syscall.SockaddrInet6{Port: a.port}
		copy(s6.Addr[:], a.ip.To16())
		sa = s6
	}
	fd, err := syscall.Socket(domain, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	if domain != syscall.AF_UNIX {
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			return nil, err
		}
	}
	syscall.Umask(sockMask)
	err = syscall.Bind(fd, sa)
	syscall.Umask(fileMask)
	if err != nil {
		return nil, err
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		return nil, err
	}
	return net.FileListener(f)
}

// listenAux creates the -N or -O socket (docs/protocols/mimedefang-multiplexor.md, "Modes and backlog": the main socket's umask;
// any address form -a takes).
func (d *daemon) listenAux(name, sock string, backlog int) (net.Listener, error) {
	a, err := parseSocket(sock, true)
	if err != nil {
		return nil, err
	}
	return d.passedListener(name, func() (net.Listener, error) { return listen(a, backlog, d.sockMask(), d.fileMask()) })
}

// refText is an error worded as the reference words it.
type refText string

func (r refText) Error() string { return string(r) }
