// Command fakeworker is a scriptable mimedefang worker for the pool and
// mux tests: it reads one command line at a time from stdin and acts on
// its first word (see commands.go); it exits at EOF.
//
// Its environment sets behaviours for every request: FAKEWORKER_EXIT_AT_START
// makes it exit (status 2) before reading anything; FAKEWORKER_START_MS
// makes it wait that many milliseconds before reading its first command;
// FAKEWORKER_EXIT_AFTER=n makes it exit (status 0) after answering n
// commands, FAKEWORKER_EXIT_AFTER_MS that many milliseconds after the
// n-th answer; FAKEWORKER_EXIT_GATE holds each exit until the test lets it
// go (gate.go); FAKEWORKER_TAG_MS sets how long "tag" takes (400 ms) and
// FAKEWORKER_SLOW_MS a "slow" request (500 ms);
// FAKEWORKER_LINGER keeps it alive an hour after EOF.
package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// config is the behaviour the environment sets for every request.
type config struct {
	exitAfter int           // FAKEWORKER_EXIT_AFTER: commands answered before exiting (0: no limit)
	exitWait  time.Duration // FAKEWORKER_EXIT_AFTER_MS: from the last answer to the exit
	slowWait  time.Duration // FAKEWORKER_SLOW_MS: how long a "slow" request takes
	tagWait   time.Duration // FAKEWORKER_TAG_MS: how long "tag" takes
	linger    bool          // FAKEWORKER_LINGER: stay alive an hour after EOF
}

func main() {
	start()
	gateStart()
	serve(bufio.NewReaderSize(os.Stdin, 1<<16), loadConfig())
	gateWait()
}

// start acts out FAKEWORKER_EXIT_AT_START and FAKEWORKER_START_MS.
func start() {
	if os.Getenv("FAKEWORKER_EXIT_AT_START") != "" {
		os.Exit(2)
	}
	if ms, err := strconv.Atoi(os.Getenv("FAKEWORKER_START_MS")); err == nil && ms > 0 {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
}

// loadConfig reads the FAKEWORKER_* settings that apply to every request.
func loadConfig() config {
	c := config{slowWait: 500 * time.Millisecond, tagWait: 400 * time.Millisecond,
		linger: os.Getenv("FAKEWORKER_LINGER") != ""}
	c.exitAfter, _ = strconv.Atoi(os.Getenv("FAKEWORKER_EXIT_AFTER"))
	if ms, err := strconv.Atoi(os.Getenv("FAKEWORKER_EXIT_AFTER_MS")); err == nil {
		c.exitWait = time.Duration(ms) * time.Millisecond
	}
	if ms, err := strconv.Atoi(os.Getenv("FAKEWORKER_SLOW_MS")); err == nil {
		c.slowWait = time.Duration(ms) * time.Millisecond
	}
	if ms, err := strconv.Atoi(os.Getenv("FAKEWORKER_TAG_MS")); err == nil {
		c.tagWait = time.Duration(ms) * time.Millisecond
	}
	return c
}

// serve answers one command line at a time until EOF or the
// FAKEWORKER_EXIT_AFTER-th answer (and FAKEWORKER_EXIT_AFTER_MS).
func serve(in *bufio.Reader, c config) {
	for answered := 0; c.exitAfter <= 0 || answered < c.exitAfter; answered++ {
		line, err := in.ReadString('\n')
		if err != nil {
			if c.linger {
				time.Sleep(time.Hour)
			}
			return
		}
		handle(c, strings.TrimSuffix(line, "\n"))
	}
	time.Sleep(c.exitWait)
}
