// Package floorcmd is what bench/mux.sh's Go floors (bench/muxgofloor,
// bench/muxgoepoll) share: sluice mux's command line as the script passes
// it, so that a floor can stand in for a sluice binary as BASELINE, and
// starting a worker on two pipes.
package floorcmd

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// Args is what a floor takes from the command line.
type Args struct {
	Socket  string // -s: the UNIX socket to listen on
	Program string // -f: the worker program
	Workers int    // -x: how many workers (default 8)
	Backlog int    // -I: the listen backlog (default: a quarter of -x, at least 5)
}

// Parse reads -s, -f, -x and -I from args (a leading "mux" and any other
// option are ignored), as the multiplexors read them.
func Parse(name string, args []string) (Args, error) {
	a := Args{Workers: 8}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-I", "-x":
			v, err := strconv.Atoi(args[i+1])
			if err != nil || v < 1 {
				return Args{}, fmt.Errorf("%s %q: want a positive number", args[i], args[i+1])
			}
			if args[i] == "-I" {
				a.Backlog = v
			} else {
				a.Workers = v
			}
		case "-s":
			a.Socket = args[i+1]
		case "-f":
			a.Program = args[i+1]
		}
	}
	if a.Socket == "" || a.Program == "" {
		return Args{}, errors.New("usage: " + name + " [mux] -s SOCKET -f WORKER [-x N] [-I BACKLOG] [ignored options]")
	}
	if a.Backlog == 0 {
		a.Backlog = max(a.Workers/4, 5)
	}
	return a, nil
}

// StartWorker starts prog with its stdin and stdout on fresh pipes and
// returns the parent's ends: stdin to write commands to, stdout to read
// replies from. Its stderr is this process's.
func StartWorker(prog string) (stdin, stdout *os.File, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, err
	}
	cmd := exec.Command(prog)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, nil, fmt.Errorf("start %s: %w", prog, err)
	}
	return inW, outR, nil
}
