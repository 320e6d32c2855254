//go:build linux

package peercred

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unixUID reads SO_PEERCRED: the peer's effective uid when it connected.
func unixUID(c net.Conn) (int, error) {
	cr, err := unixCred(c)
	return cr.UID, err
}

// unixPID reads SO_PEERCRED: the process that connected.
func unixPID(c net.Conn) (int, error) {
	cr, err := unixCred(c)
	if err != nil {
		return 0, err
	}
	return cr.PID, nil
}

// unixCred reads SO_PEERCRED: the peer's uid, gid and pid at connect
// (a Keeper's, kept).
func unixCred(c net.Conn) (Cred, error) {
	if k, ok := c.(Keeper); ok {
		return k.PeerCred()
	}
	none := Cred{UID: -1, GID: -1, PID: -1}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return none, fmt.Errorf("peercred: %T gives no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return none, fmt.Errorf("peercred: %w", err)
	}
	var cr Cred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cr, cerr = FDCred(fd) }); err != nil {
		return none, fmt.Errorf("peercred: %w", err)
	}
	return cr, cerr
}

// FDCred reads SO_PEERCRED of the unix socket fd: its peer's uid, gid
// and pid at connect. The caller holds fd open.
func FDCred(fd uintptr) (Cred, error) {
	var cred unix.Ucred
	// A raw call: getsockopt never blocks, and unlike
	// unix.GetsockoptUcred it does not enter the scheduler, which on an
	// idle daemon wakes the runtime's monitor thread (internal/rawio).
	size := uint32(unsafe.Sizeof(cred))
	_, _, errno := unix.RawSyscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_PEERCRED,
		uintptr(unsafe.Pointer(&cred)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return Cred{UID: -1, GID: -1, PID: -1}, fmt.Errorf("peercred: SO_PEERCRED: %w", errno)
	}
	return Cred{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}

// tcpUID returns the uid that owns the loopback TCP socket whose local
// address is remote and whose peer is local: the other end of our
// connection local -> remote. It asks the kernel with one
// SOCK_DIAG_BY_FAMILY request for exactly that socket.
func tcpUID(local, remote netip.AddrPort) (int, error) {
	local, remote = unmap(local), unmap(remote)
	if !remote.Addr().IsLoopback() {
		return -1, ErrNotLocal
	}
	if local.Addr().Is4() != remote.Addr().Is4() {
		return -1, fmt.Errorf("peercred: %v and %v are of different families", local, remote)
	}
	// The peer's socket: its own end is our remote, its peer our local.
	id := sockID{src: remote, dst: local}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("peercred: netlink socket (is AF_NETLINK allowed? systemd's RestrictAddressFamilies= must name it): %w", err)
	}
	defer unix.Close(fd)
	// The kernel answers while handling the send; the timeout only bounds
	// a kernel that never does.
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return -1, fmt.Errorf("peercred: netlink SO_RCVTIMEO: %w", err)
	}
	const seq = 1
	if err := unix.Sendto(fd, encodeRequest(seq, id), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, fmt.Errorf("peercred: sock_diag request: %w", err)
	}
	var buf [replyBufSize]byte
	for {
		n, from, err := unix.Recvfrom(fd, buf[:], 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("peercred: sock_diag reply: %w", err)
		}
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue // not from the kernel
		}
		uid, err := parseReply(buf[:n], seq, id)
		if errors.Is(err, errOtherMessage) {
			continue
		}
		return uid, err
	}
}
