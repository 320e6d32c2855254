// Command miltergofloor is the Go floor of bench/milter.sh: the least a
// CONNECT-only milter can be when it is written the standard Go way. A
// goroutine per connection on net.Listener and net.Conn (the Go runtime's
// poller), no limiter, no timeouts, no logging: it answers OPTNEG with the
// negotiation of the C floor (bench/milterbench/c/floor.c: version 6, no
// actions, every step but CONNECT off and reply-less) and CONNECT and
// END-OF-MESSAGE with CONTINUE, drops every other packet, and closes at
// QUIT. Beside the C floor it shows what the Go runtime itself costs a
// session: what sluice spends above the C floor and below this one is how
// far its own event loop (internal/netserve) takes it from the standard
// way.
//
//	miltergofloor /path/to/socket
//
// The socket is made mode 0666 (the bench's Postfix connects as postfix).
// It stops on SIGTERM or SIGINT.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"slices"

	"sluice/bench/internal/gofloor"
)

var (
	// optneg is the C floor's negotiation: version 6, no actions, the
	// protocol mask that leaves only CONNECT (and END-OF-MESSAGE, which
	// is always sent) with a reply.
	optneg = []byte{0, 0, 0, 13, 'O', 0, 0, 0, 6, 0, 0, 0, 0, 0, 0x0f, 0xe3, 0xfe}
	cont   = []byte{0, 0, 0, 1, 'c'}
)

// maxPacket bounds a packet's length, as libmilter's default.
const maxPacket = 64 << 10

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: miltergofloor /path/to/socket")
		os.Exit(2)
	}
	path := os.Args[1]
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err == nil {
		err = os.Chmod(path, 0o666)
	}
	if err == nil {
		err = gofloor.Run(l, answer)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "miltergofloor:", err)
		os.Exit(1)
	}
}

// answer answers c's packets until QUIT, the end of the stream or a
// packet it cannot take. A buffered reader takes what the peer sent in one
// read, as a C milter reading into its buffer would.
func answer(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 4096)
	var hdr [5]byte
	var body []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 1 || n > maxPacket {
			return
		}
		body = slices.Grow(body[:0], n-1)[:n-1]
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		var reply []byte
		switch hdr[4] {
		case 'O':
			reply = optneg
		case 'C', 'E':
			reply = cont
		case 'Q':
			return
		}
		if reply != nil {
			if _, err := c.Write(reply); err != nil {
				return
			}
		}
	}
}
