// Package peercred tells who is at the other end of an accepted local
// connection: the uid of the process that owns the peer's socket. On a
// unix socket the kernel records it at connect (SO_PEERCRED); on TCP over
// loopback the peer's socket is found by its four-tuple with a
// NETLINK_SOCK_DIAG query (what ss(8) does), whose answer carries its
// owner's uid. A TCP peer on another host has no local uid (ErrNotLocal).
//
// It imports nothing of sluice's.
package peercred

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// ErrNotLocal is returned for a TCP peer whose address is not a loopback
// address: it may be on another host, where a uid means nothing here.
var ErrNotLocal = errors.New("peercred: the peer is not on loopback, so it has no local uid")

// ErrGone is returned when the peer's socket is no longer there to be
// asked about (it closed between connect and the lookup), or is in a
// state that carries no owner (TIME_WAIT).
var ErrGone = errors.New("peercred: the peer's socket is gone")

// Keeper is a connection that keeps its unix peer's credentials once
// read (netserve's door connections): the kernel fixes them at connect,
// so the doors and their gates asking about one session cost one
// getsockopt. Unix, UID and PID ask a Keeper instead of the socket.
type Keeper interface {
	PeerCred() (Cred, error)
}

// UID returns the uid of the process that owns the socket at the other
// end of c, an accepted (or dialled) unix or TCP connection that gives its
// descriptor (syscall.Conn: *net.UnixConn, *net.TCPConn, a door's
// connection). A TCP peer must be on loopback (127.0.0.0/8, ::1, or either
// mapped into IPv6); any other gives ErrNotLocal without a query.
func UID(c net.Conn) (int, error) {
	switch c.RemoteAddr().(type) {
	case *net.UnixAddr:
		return unixUID(c)
	case *net.TCPAddr:
		local, remote, err := loopback(c)
		if err != nil {
			return -1, err
		}
		return tcpUID(local, remote)
	}
	return -1, fmt.Errorf("peercred: %T is neither a unix nor a TCP connection", c)
}

// Cred is a unix socket peer's credentials as the kernel recorded them
// when it connected.
type Cred struct {
	UID, GID, PID int
}

// Unix returns the credentials of the process at the other end of a unix
// socket connection (SO_PEERCRED): its uid, gid and pid.
func Unix(c net.Conn) (Cred, error) {
	if _, ok := c.RemoteAddr().(*net.UnixAddr); !ok {
		return Cred{UID: -1, GID: -1, PID: -1}, fmt.Errorf("peercred: a connection on %s is not a unix socket's", c.RemoteAddr().Network())
	}
	return unixCred(c)
}

// PID returns the id of the process that connected to c, an accepted
// unix socket connection (SO_PEERCRED, as seen from this process's pid
// namespace). A TCP peer has none that the kernel records: an error.
func PID(c net.Conn) (int, error) {
	if _, ok := c.RemoteAddr().(*net.UnixAddr); ok {
		return unixPID(c)
	}
	return 0, fmt.Errorf("peercred: %T carries no process id", c)
}

// loopback returns c's local and remote address when the remote one is a
// loopback address (unmapped from IPv6 when it is IPv4), else ErrNotLocal.
func loopback(c net.Conn) (local, remote netip.AddrPort, err error) {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return local, remote, ErrNotLocal
	}
	remote, local = unmap(ra.AddrPort()), unmap(la.AddrPort())
	if !remote.Addr().IsLoopback() {
		return local, remote, ErrNotLocal
	}
	return local, remote, nil
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
