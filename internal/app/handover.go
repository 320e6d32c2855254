package app

import (
	"fmt"
	"net"
	"os"
)

// HandOverListeners returns a duplicate of every listening socket, in
// binding order, each named by its door, for a process that takes them
// over (an upgrade: the new process is given them as systemd gives its
// sockets), and makes the daemon leave the unix sockets' paths in place
// when it closes its own copies: they are the new process's now.
func (d *Daemon) HandOverListeners() ([]*os.File, []string, error) {
	var files []*os.File
	var names []string
	for _, bl := range d.listeners {
		l := bl.l
		if g, ok := l.(*gatedListener); ok {
			l = g.Listener
		}
		fl, ok := l.(interface{ File() (*os.File, error) })
		if !ok {
			closeFiles(files)
			return nil, nil, fmt.Errorf("%s listener %s: no descriptor to hand over", bl.door, bl.spec)
		}
		f, err := fl.File()
		if err != nil {
			closeFiles(files)
			return nil, nil, fmt.Errorf("%s listener %s: %w", bl.door, bl.spec, err)
		}
		files, names = append(files, f), append(names, bl.door)
	}
	for _, bl := range d.listeners {
		l := bl.l
		if g, ok := l.(*gatedListener); ok {
			l = g.Listener
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
	}
	return files, names, nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
