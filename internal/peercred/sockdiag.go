package peercred

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// The sock_diag messages, as linux/netlink.h, linux/sock_diag.h and
// linux/inet_diag.h lay them out: netlink headers and the fields the
// kernel fills from its own integers are in host order, ports and
// addresses in network order.
const (
	nlmsgHdrLen     = 16 // struct nlmsghdr
	inetDiagReqLen  = 56 // struct inet_diag_req_v2
	inetDiagMsgLen  = 72 // struct inet_diag_msg
	sockIDLen       = 48 // struct inet_diag_sockid
	requestLen      = nlmsgHdrLen + inetDiagReqLen
	replyBufSize    = 8192
	nlmsgNoop       = 0x1
	nlmsgError      = 0x2
	nlmsgDone       = 0x3
	sockDiagByFam   = 20 // SOCK_DIAG_BY_FAMILY
	nlmFRequest     = 0x1
	inetDiagNoCooky = 0xffffffff // INET_DIAG_NOCOOKIE

	// TCP states (include/net/tcp_states.h) whose socket has no owner to
	// report: a TIME_WAIT or NEW_SYN_RECV mini-socket says uid 0.
	tcpTimeWait   = 6
	tcpClose      = 7
	tcpListen     = 10
	tcpNewSynRecv = 12
)

// errOtherMessage: the datagram held no message answering our request.
var errOtherMessage = errors.New("peercred: no answer to our request in the datagram")

// sockID is the four-tuple of one TCP socket as the kernel names it:
// src is the socket's own address, dst its peer's.
type sockID struct {
	src, dst netip.AddrPort
}

// family is AF_INET or AF_INET6, by the source address.
func (id sockID) family() uint8 {
	if id.src.Addr().Is4() {
		return syscall.AF_INET
	}
	return syscall.AF_INET6
}

// encodeRequest builds a SOCK_DIAG_BY_FAMILY request for the one TCP
// socket id (an exact lookup, not a dump).
func encodeRequest(seq uint32, id sockID) []byte {
	b := make([]byte, requestLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], requestLen)
	ne.PutUint16(b[4:], sockDiagByFam)
	ne.PutUint16(b[6:], nlmFRequest)
	ne.PutUint32(b[8:], seq)
	ne.PutUint32(b[12:], 0) // pid: the kernel fills it in
	r := b[nlmsgHdrLen:]
	r[0] = id.family()
	r[1] = syscall.IPPROTO_TCP
	r[2] = 0                        // idiag_ext: no extensions
	r[3] = 0                        // pad
	ne.PutUint32(r[4:], ^uint32(0)) // idiag_states: any
	putSockID(r[8:8+sockIDLen], id)
	return b
}

// putSockID writes struct inet_diag_sockid: ports and addresses in network
// order, no interface, no cookie.
func putSockID(b []byte, id sockID) {
	binary.BigEndian.PutUint16(b[0:], id.src.Port())
	binary.BigEndian.PutUint16(b[2:], id.dst.Port())
	putAddr(b[4:20], id.src.Addr())
	putAddr(b[20:36], id.dst.Addr())
	binary.NativeEndian.PutUint32(b[36:], 0) // idiag_if
	binary.NativeEndian.PutUint32(b[40:], inetDiagNoCooky)
	binary.NativeEndian.PutUint32(b[44:], inetDiagNoCooky)
}

// putAddr writes an address into a 16-byte field: an IPv4 address in its
// first four bytes.
func putAddr(b []byte, a netip.Addr) {
	clear(b)
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// sockIDOf reads struct inet_diag_sockid for family (AF_INET or AF_INET6),
// IPv4-mapped addresses unmapped.
func sockIDOf(b []byte, family uint8) (sockID, bool) {
	if len(b) < sockIDLen {
		return sockID{}, false
	}
	addr := func(f []byte) (netip.Addr, bool) {
		switch family {
		case syscall.AF_INET:
			return netip.AddrFrom4([4]byte(f[:4])), true
		case syscall.AF_INET6:
			return netip.AddrFrom16([16]byte(f[:16])).Unmap(), true
		}
		return netip.Addr{}, false
	}
	src, ok1 := addr(b[4:20])
	dst, ok2 := addr(b[20:36])
	if !ok1 || !ok2 {
		return sockID{}, false
	}
	return sockID{
		src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(b[0:])),
		dst: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(b[2:])),
	}, true
}

// parseReply reads the kernel's answer to request seq for socket want: the
// owner's uid, ErrGone when there is no such socket (ENOENT) or it has no
// owner, errOtherMessage when the datagram answers something else. Any
// input, however malformed, gives a value or an error, never a panic.
func parseReply(b []byte, seq uint32, want sockID) (int, error) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		n := int(ne.Uint32(b[0:]))
		if n < nlmsgHdrLen || n > len(b) {
			return -1, fmt.Errorf("peercred: sock_diag reply: message length %d in %d bytes", n, len(b))
		}
		typ, mseq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
		body := b[nlmsgHdrLen:n]
		if next := (n + 3) &^ 3; next < len(b) {
			b = b[next:]
		} else {
			b = nil
		}
		if mseq != seq || typ == nlmsgNoop {
			continue
		}
		switch typ {
		case nlmsgError:
			if len(body) < 4 {
				return -1, errors.New("peercred: sock_diag reply: short error message")
			}
			errno := -int32(ne.Uint32(body))
			switch {
			case errno == 0:
				continue // an acknowledgement; the answer is elsewhere
			case syscall.Errno(errno) == syscall.ENOENT:
				return -1, ErrGone
			}
			return -1, fmt.Errorf("peercred: sock_diag: %w", syscall.Errno(errno))
		case nlmsgDone:
			return -1, ErrGone
		case sockDiagByFam:
			return diagMsgUID(body, want)
		}
	}
	return -1, errOtherMessage
}

// diagMsgUID reads struct inet_diag_msg: the socket must be the one asked
// for, in a state that has an owner.
func diagMsgUID(m []byte, want sockID) (int, error) {
	if len(m) < inetDiagMsgLen {
		return -1, fmt.Errorf("peercred: sock_diag reply: inet_diag_msg of %d bytes", len(m))
	}
	family, state := m[0], m[1]
	got, ok := sockIDOf(m[4:4+sockIDLen], family)
	if !ok {
		return -1, fmt.Errorf("peercred: sock_diag reply: address family %d", family)
	}
	if got != want {
		return -1, fmt.Errorf("peercred: sock_diag answered for %v -> %v, not %v -> %v", got.src, got.dst, want.src, want.dst)
	}
	switch state {
	case tcpTimeWait, tcpClose, tcpListen, tcpNewSynRecv:
		return -1, ErrGone
	}
	return int(binary.NativeEndian.Uint32(m[4+sockIDLen+12:])), nil
}
