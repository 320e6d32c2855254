package sdlisten

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// HandoffVar is the environment variable through which sluice, started
// as root, passes the sockets it bound (and those systemd passed it) to
// itself across the exec that gives root up: the descriptor numbers, in
// the order the daemon binds its listeners, comma-separated, each
// followed by "s" when systemd passed it.
const HandoffVar = "SLUICE_LISTEN_FDS"

// Handoff is the ordered list of listening sockets the root phase passed
// across its exec. The daemon takes them in the order it binds its
// listeners, so that an address such as 127.0.0.1:0 gets the very socket
// the root phase bound for it.
type Handoff struct {
	socks []handed
}

type handed struct {
	l       net.Listener
	systemd bool
}

// EncodeHandoff is HandoffVar's value for fds, in order; systemd[i] says
// fds[i] came from systemd.
func EncodeHandoff(fds []int, systemd []bool) string {
	parts := make([]string, len(fds))
	for i, fd := range fds {
		parts[i] = strconv.Itoa(fd)
		if systemd[i] {
			parts[i] += "s"
		}
	}
	return strings.Join(parts, ",")
}

// TakeHandoff takes the sockets HandoffVar names and unsets it; nil when
// there is none. Each must be a listening stream socket; on an error
// every one is closed.
func TakeHandoff() (*Handoff, error) {
	v, ok := os.LookupEnv(HandoffVar)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(HandoffVar)
	h := &Handoff{}
	if v == "" {
		return h, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxFDs {
		return nil, fmt.Errorf("%s names %d descriptors, more than %d", HandoffVar, len(parts), maxFDs)
	}
	for i, p := range parts {
		systemd := strings.HasSuffix(p, "s")
		fd, err := strconv.Atoi(strings.TrimSuffix(p, "s"))
		if err == nil && fd < firstFD {
			err = fmt.Errorf("below %d", firstFD)
		}
		var l net.Listener
		if err == nil {
			l, err = listener(fd, "sluice")
		}
		if err != nil {
			h.Close()
			closeRest(parts[i+1:])
			return nil, fmt.Errorf("%s=%q: descriptor %q: %w", HandoffVar, v, p, err)
		}
		if ul, ok := l.(*net.UnixListener); ok && !systemd {
			ul.SetUnlinkOnClose(true) // bound by sluice: its path is sluice's
		}
		h.socks = append(h.socks, handed{l: l, systemd: systemd})
	}
	return h, nil
}

func closeRest(parts []string) {
	for _, p := range parts {
		if fd, err := strconv.Atoi(strings.TrimSuffix(p, "s")); err == nil && fd >= firstFD {
			os.NewFile(uintptr(fd), "").Close()
		}
	}
}

// Next takes the next handed-over socket for the listen address addr on
// network; it must be bound there (a configured TCP port 0 takes the
// port the root phase got). systemd says the socket came from systemd.
// ok is false when h holds no more sockets.
func (h *Handoff) Next(network, addr string) (l net.Listener, systemd, ok bool, err error) {
	if h == nil || len(h.socks) == 0 {
		return nil, false, false, nil
	}
	s := h.socks[0]
	h.socks = h.socks[1:]
	if !handedMatches(s.l.Addr(), network, addr) {
		s.l.Close()
		return nil, false, false, fmt.Errorf("the socket the root phase bound is %s, not %s:%s (was the configuration changed while sluice started?)", s.l.Addr(), network, addr)
	}
	return s.l, s.systemd, true, nil
}

func handedMatches(a net.Addr, network, addr string) bool {
	if bound(a, network, addr) {
		return true
	}
	ta, ok := a.(*net.TCPAddr)
	if !ok || network != "tcp" {
		return false
	}
	want, err := net.ResolveTCPAddr("tcp", addr)
	return err == nil && want.Port == 0 && want.IP.Equal(ta.IP)
}

// Left is the number of sockets not taken.
func (h *Handoff) Left() int {
	if h == nil {
		return 0
	}
	return len(h.socks)
}

// Close closes the sockets not taken.
func (h *Handoff) Close() {
	if h == nil {
		return
	}
	for _, s := range h.socks {
		s.l.Close()
	}
	h.socks = nil
}
