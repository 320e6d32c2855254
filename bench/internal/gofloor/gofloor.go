// Package gofloor is what the benches' Go floors with a goroutine per
// connection share (bench/policyfloor, bench/miltergofloor): the standard
// library's way to serve a listener, with nothing of sluice's between the
// socket and the protocol's answers.
package gofloor

import (
	"errors"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// Serve accepts l's connections until l is closed, each answered by
// answer on a goroutine of its own (answer closes it). It returns nil once
// l is closed, or the error that stopped accepting.
func Serve(l net.Listener, answer func(net.Conn)) error {
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go answer(c)
	}
}

// Run is Serve until SIGTERM or SIGINT, which close l.
func Run(l net.Listener, answer func(net.Conn)) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-sig:
			l.Close()
		case <-stop:
		}
	}()
	return Serve(l, answer)
}
