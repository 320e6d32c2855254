package sdlisten

import (
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// SystemdSuffix marks, in the name an upgrade passes a listening socket
// under ("policy" + SystemdSuffix), a socket the old process had from
// systemd: its path, owner and mode are the socket unit's, not sluice's.
// Every other socket an upgrade passes is one sluice bound, whose path
// and settings the new process takes over.
const SystemdSuffix = ".systemd"

// TakeFiles takes the descriptors e announces to this process, whatever
// they are (an upgrade passes files besides sockets: the multiplexor's
// pid and lock files), each with its name; they are marked close-on-exec
// and are the caller's to close. On an error every descriptor announced
// is closed.
func TakeFiles(e Env) ([]*os.File, []string, error) {
	names, err := e.parse(os.Getpid())
	if err != nil {
		return nil, nil, err
	}
	files := make([]*os.File, 0, len(names))
	for i, name := range names {
		fd := firstFD + i
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			for _, f := range files {
				f.Close()
			}
			closeFrom(fd+1, len(names)-i-1)
			return nil, nil, fmt.Errorf("descriptor %d (%s): %w", fd, name, err)
		}
		unix.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), name))
	}
	return files, names, nil
}

func closeFrom(fd, n int) {
	for i := range n {
		unix.Close(fd + i)
	}
}

// FromUpgrade makes Sockets of the listening sockets an upgrade passed,
// named as the old process named them (SystemdSuffix marks systemd's).
// A unix socket sluice bound is sluice's again: its path is removed when
// it is closed, and Claim says it is sluice's, so that the new process
// applies its configuration's owner and mode to it. The files stay the
// caller's to close.
func FromUpgrade(files []*os.File, names []string) (*Sockets, error) {
	s, err := FromFiles(files, names)
	if err != nil {
		return nil, err
	}
	for i := range s.socks {
		sk := &s.socks[i]
		name, systemd := strings.CutSuffix(sk.name, SystemdSuffix)
		sk.name, sk.ours = name, !systemd
		if ul, ok := sk.l.(*net.UnixListener); ok && sk.ours {
			ul.SetUnlinkOnClose(true)
		}
	}
	return s, nil
}

// CloseOurs closes the sockets not claimed that sluice bound (FromUpgrade:
// those the new configuration no longer names; a unix socket's path is
// removed) and returns them, "NAME (ADDRESS)" each. Those systemd passed
// stay for Unclaimed.
func (s *Sockets) CloseOurs() []string {
	if s == nil {
		return nil
	}
	var closed []string
	kept := s.socks[:0]
	for _, sk := range s.socks {
		if !sk.ours {
			kept = append(kept, sk)
			continue
		}
		closed = append(closed, fmt.Sprintf("%s (%s)", sk.name, sk.l.Addr()))
		sk.l.Close()
	}
	s.socks = kept
	return closed
}
