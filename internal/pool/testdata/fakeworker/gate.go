package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
)

// The exit gate (FAKEWORKER_EXIT_GATE=dir, relative to the working
// directory): a test that must know in which order workers exit (the
// multiplexor's reap order decides which slot is started next) holds
// each exit until it lets it go. The worker appends its pid to dir/started
// when it starts; when it would exit (end of file on stdin, SIGTERM, the
// FAKEWORKER_EXIT_AFTER-th answer) it makes the FIFO dir/exit.<pid> and
// opens it for reading, which blocks until the test opens it for writing;
// then it exits as it would have (by SIGTERM's default action after a
// SIGTERM). The exits its commands act out (die, partial) are not held.

// gateDir is FAKEWORKER_EXIT_GATE ("" for no gate).
var gateDir = os.Getenv("FAKEWORKER_EXIT_GATE")

// gateOnce makes a second way out (a SIGTERM while the end of file is
// held) wait for the first.
var gateOnce sync.Once

// gateStart records the worker's start and has a SIGTERM go through the
// gate.
func gateStart() {
	if gateDir == "" {
		return
	}
	_ = os.MkdirAll(gateDir, 0o755)
	f, err := os.OpenFile(filepath.Join(gateDir, "started"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakeworker: exit gate: %v\n", err)
		os.Exit(4)
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	f.Close()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		gateWait()
		signal.Reset(syscall.SIGTERM)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {}
	}()
}

// gateWait waits, with an exit gate, until the test lets this worker
// exit.
func gateWait() {
	if gateDir == "" {
		return
	}
	held := false
	gateOnce.Do(func() {
		held = true
		fifo := filepath.Join(gateDir, fmt.Sprintf("exit.%d", os.Getpid()))
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "fakeworker: exit gate: %v\n", err)
			return
		}
		if f, err := os.OpenFile(fifo, os.O_RDONLY, 0); err == nil {
			f.Close()
		}
	})
	if !held {
		select {} // the first way out exits
	}
}
