package sdlisten

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// MaxUnitFile caps a socket unit file read by ParseSocketUnit's callers:
// far above any unit, far below what could hurt.
const MaxUnitFile = 64 << 10

// maxUnitLine caps one line of a unit file.
const maxUnitLine = 4096

// UnitListen is one ListenStream= of a socket unit: the address systemd
// binds and passes, and where the line is.
type UnitListen struct {
	Line  int      // 1-based line in the unit file
	Value string   // as written
	Addr  net.Addr // *net.UnixAddr or *net.TCPAddr, as systemd binds it
}

// Names reports whether the listen address network/addr of a
// configuration is this socket, by the rule the daemon claims passed
// sockets with: the same path, or the same IP address and port.
func (u UnitListen) Names(network, addr string) bool { return bound(u.Addr, network, addr) }

// ParseSocketUnit reads the ListenStream= lines of the [Socket] section
// of a systemd socket unit. Other settings are ignored; a ListenStream=
// whose address systemd would read differently from sluice (an abstract
// socket, a network interface suffix, a value sluice cannot parse) is an
// error naming its line, and so is a line longer than 4096 bytes.
// ListenDatagram=, ListenSequentialPacket= and the like are errors too:
// every door of sluice is a stream.
func ParseSocketUnit(b []byte) ([]UnitListen, error) {
	var out []UnitListen
	err := scanSection(b, "[Socket]", func(n int, key, val string) error {
		switch {
		case key == "ListenStream":
			if val == "" { // an empty assignment resets the list
				out = out[:0]
				return nil
			}
			a, err := unitAddr(val)
			if err != nil {
				return fmt.Errorf("line %d: ListenStream=%s: %w", n, val, err)
			}
			out = append(out, UnitListen{Line: n, Value: val, Addr: a})
		case strings.HasPrefix(key, "Listen"):
			return fmt.Errorf("line %d: %s= is not a stream socket; sluice serves only ListenStream=", n, key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanSection calls fn for each KEY=VALUE line of the unit file's
// section (e.g. "[Socket]"), with its 1-based line number; comments and
// other sections are skipped. A line that is not KEY=VALUE, or longer
// than 4096 bytes, is an error.
func scanSection(b []byte, section string, fn func(n int, key, val string) error) error {
	in := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 256), maxUnitLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			in = line
			continue
		}
		if in != section {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("line %d: %q is not KEY=VALUE", n, line)
		}
		if err := fn(n, strings.TrimSpace(key), strings.TrimSpace(val)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	return nil
}

// unitAddr is the address systemd binds for a ListenStream= value
// (systemd.socket(5)): an absolute path is a unix socket; a port alone
// is that port on every address ([::], dual-stack); otherwise host:port
// with a numeric IPv4 or bracketed IPv6 address.
func unitAddr(v string) (net.Addr, error) {
	switch {
	case v[0] == '/':
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("a path with a NUL byte")
		}
		return &net.UnixAddr{Name: v, Net: "unix"}, nil
	case v[0] == '@':
		return nil, fmt.Errorf("an abstract socket; sluice's listen addresses are paths or host:port")
	}
	if p, err := strconv.ParseUint(v, 10, 16); err == nil {
		if p == 0 {
			return nil, fmt.Errorf("port 0")
		}
		return &net.TCPAddr{IP: net.IPv6unspecified, Port: int(p)}, nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return nil, fmt.Errorf("neither a path nor a port nor host:port: %w", err)
	}
	if strings.Contains(host, "%") {
		return nil, fmt.Errorf("an interface suffix (%%) in the address; name the address alone")
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("%q is not a numeric IP address", host)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return &net.TCPAddr{IP: ip, Port: int(p)}, nil
}
