// Command policyfloor is the floor of bench/policy.sh: the least a Postfix
// policy server can do on the same socket, written the standard Go way:
// a goroutine per connection (net.Listener and net.Conn on the Go
// runtime's poller, bench/internal/gofloor), one request at a time: it
// reads lines until the empty line that ends a request, looks at nothing
// in them, and writes a fixed "action=DUNNO" reply in one write. No
// parsing, no limits, no timeouts, no logging. sluice's door runs on its
// own event loop (internal/netserve) and decides; the C floor
// (bench/protofloor.c) marks what answering the protocol costs at the
// least.
//
//	policyfloor -listen 127.0.0.1:10041
//
// It stops on SIGTERM or SIGINT.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"

	"sluice/bench/internal/gofloor"
)

// reply is the one answer it gives.
var reply = []byte("action=DUNNO\n\n")

func main() {
	listen := flag.String("listen", "127.0.0.1:10041", "the TCP address to listen on")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err == nil {
		err = gofloor.Run(l, answer)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "policyfloor:", err)
		os.Exit(1)
	}
}

// answer replies to each request of c until it ends.
func answer(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 4096)
	for {
		if err := skipRequest(r); err != nil {
			return
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}

// skipRequest reads up to and including the empty line that ends a
// request. A line longer than the buffer is read in pieces.
func skipRequest(r *bufio.Reader) error {
	start := true // at the start of a line
	for {
		line, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			start = false
			continue
		case err != nil:
			if err == io.EOF && len(line) > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if start && len(line) == 1 {
			return nil
		}
		start = true
	}
}
