//go:build !linux

package peercred

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// unixCred: SO_PEERCRED is Linux's.
func unixCred(net.Conn) (Cred, error) {
	return Cred{UID: -1, GID: -1, PID: -1}, fmt.Errorf("peercred: a unix socket's peer: %w", errors.ErrUnsupported)
}

// FDCred: SO_PEERCRED is Linux's.
func FDCred(uintptr) (Cred, error) {
	return Cred{UID: -1, GID: -1, PID: -1}, fmt.Errorf("peercred: a unix socket's peer: %w", errors.ErrUnsupported)
}

// unixUID: SO_PEERCRED is Linux's.
func unixUID(net.Conn) (int, error) {
	return -1, fmt.Errorf("peercred: a unix socket's peer: %w", errors.ErrUnsupported)
}

// unixPID: SO_PEERCRED is Linux's.
func unixPID(net.Conn) (int, error) {
	return 0, fmt.Errorf("peercred: a unix socket's peer: %w", errors.ErrUnsupported)
}

// tcpUID returns ErrNotLocal for a peer off loopback; NETLINK_SOCK_DIAG,
// which finds a loopback peer's socket, is Linux's.
func tcpUID(local, remote netip.AddrPort) (int, error) {
	if !unmap(remote).Addr().IsLoopback() {
		return -1, ErrNotLocal
	}
	return -1, fmt.Errorf("peercred: a loopback peer: %w", errors.ErrUnsupported)
}
