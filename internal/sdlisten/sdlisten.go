// Package sdlisten takes the listening sockets systemd hands a
// socket-activated service (sd_listen_fds(3)): descriptors from 3 on,
// announced by $LISTEN_PID, $LISTEN_FDS and $LISTEN_FDNAMES. With a
// socket unit the sockets exist, with systemd's owner and mode, before
// the daemon starts and while it restarts, so no client finds them gone.
//
// The protocol is three environment variables; it needs no dependency.
package sdlisten

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// firstFD is SD_LISTEN_FDS_START.
const firstFD = 3

// maxFDs bounds $LISTEN_FDS, a sanity limit far above any socket unit.
const maxFDs = 1024

// Sockets are the listening sockets systemd passed. The daemon claims
// each for the listen address it is bound to, so the config names
// addresses as usual and clients still know where to connect. A nil
// *Sockets holds none.
type Sockets struct {
	socks []socket
}

type socket struct {
	name string // FileDescriptorName=, by default the socket unit's name
	l    net.Listener
	ours bool // bound by sluice and passed by an upgrade (FromUpgrade)
}

// Env is the process environment the sockets are announced in.
type Env struct {
	PID     string // $LISTEN_PID
	FDs     string // $LISTEN_FDS
	FDNames string // $LISTEN_FDNAMES
}

// FromEnviron reads Env from the process environment and unsets the
// three variables, so that child processes do not take the sockets for
// theirs.
func FromEnviron() Env {
	e := Env{PID: os.Getenv("LISTEN_PID"), FDs: os.Getenv("LISTEN_FDS"), FDNames: os.Getenv("LISTEN_FDNAMES")}
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		os.Unsetenv(k)
	}
	return e
}

// parse returns the names of the descriptors e announces to pid, nil
// when it announces none (no $LISTEN_FDS, or $LISTEN_PID names another
// process: the variables were inherited, not meant for us).
func (e Env) parse(pid int) ([]string, error) {
	if e.FDs == "" {
		return nil, nil
	}
	if e.PID != "" {
		p, err := strconv.Atoi(e.PID)
		if err != nil {
			return nil, fmt.Errorf("LISTEN_PID=%q is not a process id", e.PID)
		}
		if p != pid {
			return nil, nil
		}
	}
	n, err := strconv.Atoi(e.FDs)
	if err != nil || n < 0 || n > maxFDs {
		return nil, fmt.Errorf("LISTEN_FDS=%q is not a count of descriptors (0 to %d)", e.FDs, maxFDs)
	}
	names := make([]string, n)
	if e.FDNames != "" {
		given := strings.Split(e.FDNames, ":")
		if len(given) != n {
			return nil, fmt.Errorf("LISTEN_FDNAMES has %d names for LISTEN_FDS=%d descriptors", len(given), n)
		}
		copy(names, given)
	}
	for i, name := range names {
		if name == "" {
			names[i] = "unknown" // systemd's name when none is set
		}
	}
	return names, nil
}

// Take returns the sockets e announces to this process. Every one must
// be a listening stream socket (a socket unit with Accept=no); the
// descriptors are marked close-on-exec. A descriptor that is not is an
// error, and every descriptor is then closed.
func Take(e Env) (*Sockets, error) {
	names, err := e.parse(os.Getpid())
	if err != nil || len(names) == 0 {
		return nil, err
	}
	s := &Sockets{}
	for i, name := range names {
		fd := firstFD + i
		l, err := listener(fd, name)
		if err != nil {
			s.Close()
			for rest := fd + 1; rest < firstFD+len(names); rest++ {
				unix.Close(rest)
			}
			return nil, err
		}
		s.socks = append(s.socks, socket{name: name, l: l})
	}
	return s, nil
}

func listener(fd int, name string) (net.Listener, error) {
	unix.CloseOnExec(fd)
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("systemd socket %d (%s): not a socket: %w", fd, name, err)
	}
	acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil || typ != unix.SOCK_STREAM || acc != 1 {
		unix.Close(fd)
		return nil, fmt.Errorf("systemd socket %d (%s): not a listening stream socket (use ListenStream= and Accept=no)", fd, name)
	}
	f := os.NewFile(uintptr(fd), "systemd:"+name)
	l, err := net.FileListener(f) // dups the descriptor
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("systemd socket %d (%s): %w", fd, name, err)
	}
	if ul, ok := l.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false) // the path is systemd's
	}
	return l, nil
}

// Claim returns, and removes from s, the socket bound to addr on network
// ("unix" with a path, "tcp" with host:port, the host resolved), if
// systemd (or an upgrade) passed one; ours says sluice bound it (an
// upgrade passed it, FromUpgrade), so that its settings are sluice's to
// apply.
func (s *Sockets) Claim(network, addr string) (l net.Listener, ours, ok bool) {
	if s == nil {
		return nil, false, false
	}
	for i, sk := range s.socks {
		if bound(sk.l.Addr(), network, addr) {
			s.socks = slices.Delete(s.socks, i, i+1)
			return sk.l, sk.ours, true
		}
	}
	return nil, false, false
}

func bound(a net.Addr, network, addr string) bool {
	switch a := a.(type) {
	case *net.UnixAddr:
		return network == "unix" && filepath.Clean(a.Name) == filepath.Clean(addr)
	case *net.TCPAddr:
		if network != "tcp" {
			return false
		}
		want, err := net.ResolveTCPAddr("tcp", addr)
		return err == nil && want.Port == a.Port && want.IP.Equal(a.IP)
	}
	return false
}

// Unclaimed describes the sockets no one claimed, "NAME (ADDRESS)" each.
func (s *Sockets) Unclaimed() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.socks))
	for _, sk := range s.socks {
		out = append(out, fmt.Sprintf("%s (%s)", sk.name, sk.l.Addr()))
	}
	return out
}

// Close closes the sockets not claimed.
func (s *Sockets) Close() {
	if s == nil {
		return
	}
	for _, sk := range s.socks {
		sk.l.Close()
	}
	s.socks = nil
}

// FromFiles makes Sockets of listening sockets held as files, named as
// LISTEN_FDNAMES would name them (a daemon that takes back the sockets it
// handed to a process that failed). The files stay the caller's to close.
func FromFiles(files []*os.File, names []string) (*Sockets, error) {
	if len(files) != len(names) {
		return nil, fmt.Errorf("%d sockets with %d names", len(files), len(names))
	}
	s := &Sockets{}
	for i, f := range files {
		l, err := net.FileListener(f) // dups the descriptor
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("socket %s (%s): %w", f.Name(), names[i], err)
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		s.socks = append(s.socks, socket{name: names[i], l: l})
	}
	return s, nil
}
