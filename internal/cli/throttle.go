package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sluice/internal/control"
	"strings"
	"syscall"
	"time"

	"sluice/internal/config"
	"sluice/internal/sockaccess"
	"sluice/internal/status"
	"sluice/internal/throttle"
)

// exTempFail is sysexits' EX_TEMPFAIL: "try again later".
const exTempFail = 75

// throttleCmd waits for a send slot, then runs COMMAND with stdio passed
// through, and returns its exit status. The slot's concurrency lease ends
// when COMMAND ends.
func throttleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "show" || args[0] == "suspend" || args[0] == "resume" || args[0] == "reset") {
		return throttleAdmin(ctx, args[0], args[1:], stdout, stderr)
	}
	fs := newFlags("throttle", stderr)
	sock := fs.String("s", filepath.Join(config.DefaultRuntimeDir(), "throttle"), "throttle server: a unix socket `path`, unix:PATH or inet:HOST:PORT (default: where sluice serve run by this user puts it)")
	key := fs.String("k", "", "the `key` to throttle on (destination host, relay); with -qmail-remote, the host argument")
	qmail := fs.Bool("qmail-remote", false, "act as qmail-remote: key from the host argument; defer with a qmail-remote report")
	failOpen := fs.Bool("fail-open", false, "send anyway when the throttle server cannot be reached (default: defer)")
	timeout := fs.Duration("connect-timeout", 5*time.Second, "how long to try to reach the server")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: sluice throttle [-s SOCKET] -k KEY [-fail-open] -- COMMAND [ARGS...]")
		fmt.Fprintln(w, "       sluice throttle -qmail-remote [-s SOCKET] -- /var/qmail/bin/qmail-remote-real host sender recip...")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Waits (one sleep, no polling) for the key's next send slot, then runs COMMAND.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "flags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	cmdArgs := fs.Args()
	if len(cmdArgs) == 0 {
		fs.Usage()
		return 2
	}
	if *qmail {
		if len(cmdArgs) < 2 {
			fmt.Fprintln(stderr, "sluice throttle: -qmail-remote needs COMMAND host sender recip...")
			return 2
		}
		if *key == "" {
			*key = strings.ToLower(cmdArgs[1])
		}
	}
	if *key == "" {
		fmt.Fprintln(stderr, "sluice throttle: -k KEY is required")
		return 2
	}
	deferred := func(reason string) int {
		reason = status.Safe(reason) // the server's words, maybe a relay's
		if *qmail {
			// qmail-remote's report for a temporary failure of the whole
			// message: "Z", the text, a newline and a NUL. qmail-send requeues it.
			fmt.Fprintf(stdout, "Z%s (#4.3.0)\n\x00", reason)
			return 0
		}
		fmt.Fprintf(stderr, "sluice throttle: deferred: %s\n", reason)
		return exTempFail
	}
	network, addr := "unix", *sock
	if strings.Contains(*sock, ":") {
		n, a, err := config.ParseListen(*sock)
		if err != nil {
			fmt.Fprintf(stderr, "sluice throttle: -s: %v\n", err)
			return 2
		}
		network, addr = n, a
	}
	// qmail-rspawn reads qmail-remote's stderr as part of its report, up
	// to the message report: with -qmail-remote, notes come after it.
	notes := stderr
	if *qmail {
		held := &bytes.Buffer{}
		notes = held
		defer func() { stderr.Write(held.Bytes()) }()
	}
	cl, rep, err := takeSlot(ctx, network, addr, *key, *timeout, notes)
	var se signalError
	switch {
	case errors.As(err, &se):
		return 128 + int(se.sig)
	case err != nil:
		if !*failOpen {
			return deferred(fmt.Sprintf("throttle server unavailable (%v)", err))
		}
		fmt.Fprintf(notes, "sluice throttle: %v; sending unthrottled (fail-open)\n", err)
	case rep.Defer != "":
		return deferred(rep.Defer)
	}
	if *qmail {
		return runQmailRemote(cl, cmdArgs, stdout, stderr)
	}
	return runReported(cl, cmdArgs, stdout, stderr)
}

// maxStaleSlots is how many times a sender that woke too late for its
// slot asks again before it defers (its host is too busy to send on time).
const maxStaleSlots = 3

// signalError is a termination signal that ended the wait; the exit status
// is 128 plus its number.
type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

// takeSlot asks the server for key's slot and sleeps until it. A sender
// that wakes after the slot's latest time (a stalled host) would send late
// into the window of the slots after it: it gives the slot up and asks
// again, up to maxStaleSlots times, then defers. It returns the open
// client (nil when told to defer, with rep.Defer set), or the error that
// kept it from a slot (a signalError for a signal).
func takeSlot(ctx context.Context, network, addr, key string, timeout time.Duration, stderr io.Writer) (*throttle.Client, throttle.Reply, error) {
	for stale := 1; ; stale++ {
		cl, err := throttle.Dial(network, addr, timeout)
		if network == "unix" {
			err = sockaccess.Explain(addr, err, "[throttle.socket] group and mode in sluice.toml")
		}
		if err != nil {
			return nil, throttle.Reply{}, err
		}
		rep, err := acquireOrSignal(ctx, cl, key)
		if err != nil || rep.Defer != "" {
			cl.Close()
			if errors.Is(err, errInterrupted) {
				err = signalError{syscall.SIGTERM}
			}
			return nil, rep, err
		}
		revoked, stop := cl.Watch()
		sig, why := sleepUntil(rep.At, revoked)
		stop()
		if why == "" {
			select {
			case why = <-revoked: // taken back as the sleep ended
			default:
			}
		}
		if sig != 0 {
			cl.Close() // the slot goes back
			return nil, rep, signalError{sig}
		}
		if why != "" {
			cl.Close() // the key was suspended while this sender waited
			return nil, throttle.Reply{Defer: why}, nil
		}
		late := time.Since(rep.Latest)
		if rep.Latest.IsZero() || late <= 0 {
			return cl, rep, nil
		}
		cl.Close() // too late to use it: asking again books after the others
		if stale == maxStaleSlots {
			return nil, throttle.Reply{Defer: fmt.Sprintf("woke too late for the send slot %d times (last by %s): this host is too busy to send on time", stale, late.Round(time.Millisecond))}, nil
		}
		fmt.Fprintf(stderr, "sluice throttle: woke %s after the send slot's latest time; asking for a new slot\n", late.Round(time.Millisecond))
	}
}

// sleepUntil sleeps once until t; a termination signal ends the sleep and
// is returned (0 when the sleep ran out), and so does the server taking
// the slot back (the reason is returned).
func sleepUntil(t time.Time, revoked <-chan string) (syscall.Signal, string) {
	d := time.Until(t)
	if d <= 0 {
		select {
		case why := <-revoked:
			return 0, why
		default:
			return 0, ""
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return 0, ""
	case why := <-revoked:
		return 0, why
	case s := <-sigs:
		return s.(syscall.Signal), ""
	}
}

var errInterrupted = errors.New("interrupted")

// acquireOrSignal asks for a slot; a signal while waiting ends the wait.
func acquireOrSignal(ctx context.Context, cl *throttle.Client, key string) (throttle.Reply, error) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	type result struct {
		r   throttle.Reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := cl.Acquire(key)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-sigs:
	case <-ctx.Done():
	}
	cl.Close() // unblocks Acquire
	<-done
	return throttle.Reply{}, errInterrupted
}

// runCommand runs the command with stdin passed through and its output to
// stdout and errout, forwards termination signals to it, and returns its
// exit status (128+signal if killed).
func runCommand(argv []string, stdout, errout io.Writer, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, errout
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "sluice throttle: %v\n", err)
		return 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s)
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ee.ExitCode()
			}
			if err != nil {
				fmt.Fprintf(stderr, "sluice throttle: %v\n", err)
				return 1
			}
			return 0
		}
	}
}

// throttleAdmin runs "sluice throttle show|suspend|resume|reset": the words
// are taken before the wrapper's flags, so no wrapper call is one.
func throttleAdmin(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	f := newCtlFlags("throttle "+sub, stderr)
	dur := f.fs.String("for", "", "suspend: how `long` (30s, 1h)")
	f.usage(
		"usage: sluice throttle show [KEY]",
		"       sluice throttle suspend -for DURATION KEY",
		"       sluice throttle resume KEY",
		"       sluice throttle reset KEY",
		"\nA suspended key's senders defer (qmail report Z) until it resumes, on every daemon sharing Redis.",
		"reset forgets the key's learned limit and ban streak: it sends at its configured limit again.",
	)
	if code, ok := parseFlags(f.fs, args, stdout, stderr); !ok {
		return code
	}
	req := control.Request{Command: "throttle." + sub, Args: map[string]string{"for": *dur}}
	switch {
	case f.fs.NArg() == 1:
		req.Args["key"] = f.fs.Arg(0)
	case f.fs.NArg() > 1 || sub != "show":
		f.fs.Usage()
		return 2
	}
	return f.do(ctx, req, stdout, stderr)
}
