// Command floodload is the Go side of bench/flood.sh: a private Postfix
// instance, a flood of idle bots against it while known peers and single
// senders send mail, and the CPU cost of a refused reconnect. One binary,
// four subcommands ("floodload SUBCOMMAND -h" lists each one's flags):
//
// "floodload postfix -dir D -port P [-own-anvil=false] [-postscreen]
// [-set name=value ...]" runs a private Postfix instance (built on
// internal/testutil/postfixtest) with an SMTP listener on 127.0.0.1:P and
// the extra main.cf parameters; without its own anvil an external server
// (sluice's anvil door) must listen on private/anvil; with -postscreen
// the listener is postscreen(8), one process screening every connection
// (postscreen_access_list and the rest come with -set), passing the
// clients it lets through to smtpd. Once the instance is up it prints
//
//	ready master=<pid> maillog=<path> anvil=<path>
//
// ("failed: ..." if the postscreen reload failed) and stays up until
// SIGINT or SIGTERM, or until stdin reaches end of file when stdin is a
// pipe. It must run as root.
//
// "floodload round -addr host:port" runs one round: the known peers
// (127.0.1.0/24) alone, each sending one whole message per SMTP session
// in a loop, for -base; then the bots (one address each, five to a /24
// from 127.20.0.0 on) connect, say EHLO and hold the session idle,
// reconnecting when refused or dropped; after -warmup the known peers
// send again, and a single sender from a /24 of its own (127.60.0.0 on)
// sends one message every -single-every, for -duration. It prints one
// line (see result.line):
//
//	row=L base_mps= flood_mps= goodput= p99_ms= fails= ... single_rate= held_median= ...
//
// "floodload cost -addr host:port -sid MASTERPID [-pid SLUICEPID]" first
// takes -hold sessions from bot addresses (to fill a class capped at
// that), then reconnects from -c other bot addresses as fast as the MTA
// answers, and prints the CPU time of the Postfix instance (every process
// of master's session, reaped children included) and of sluice per
// reconnect:
//
//	mech=L reconnects= refused= accepted= errors= per_s= postfix_us= sluice_us= total_us=
//
// "floodload socketmap -socket PATH -reject CIDR[,CIDR...]" serves a
// socket map for postscreen_access_list on a unix socket, with sluice's
// socket map server (internal/socketmap): "OK reject" for an address in
// the networks, "NOTFOUND " for any other. It prints "ready" and serves
// until SIGINT or SIGTERM, or until stdin reaches end of file when stdin
// is a pipe: the stand-in for class caps answered by sluice to postscreen.
//
// Every client binds its own loopback address: Linux routes all of
// 127.0.0.0/8 to lo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sluice/bench/internal/postfixrun"
	"sluice/internal/testutil/postfixtest"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: floodload postfix|round|cost|socketmap [flags]   ("floodload SUBCOMMAND -h": its flags)

  postfix  a private Postfix instance (as root): -dir, -port, -own-anvil, -postscreen, -set
  round    one round of the flood: known peers alone, then with bots and single senders
  cost     the CPU of the MTA and sluice per refused (or accepted) reconnect
  socketmap  a socket map for postscreen_access_list: -socket, -reject
`

func realMain(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "postfix":
		return runPostfix(args[1:], stdin, stdout, stderr)
	case "round":
		var f roundFlags
		return sub("round", args[1:], stdout, stderr, f.register, f.check,
			func(ctx context.Context) error { return runRound(ctx, f, stdout) })
	case "cost":
		var f costFlags
		return sub("cost", args[1:], stdout, stderr, f.register, f.check,
			func(ctx context.Context) error { return runCost(ctx, f, stdout) })
	case "socketmap":
		var path, reject string
		return sub("socketmap", args[1:], stdout, stderr, func(fs *flag.FlagSet) {
			fs.StringVar(&path, "socket", "", "the unix socket to serve (required)")
			fs.StringVar(&reject, "reject", "", "the networks answered \"OK reject\", comma-separated CIDRs (required)")
		}, func() error {
			if path == "" || reject == "" {
				return errors.New("-socket and -reject are required")
			}
			return nil
		}, func(context.Context) error { return runSocketmap(path, reject, stdin, stdout) })
	}
	fmt.Fprintf(stderr, "floodload: unknown subcommand %q\n%s", args[0], usage)
	return 2
}

// sub parses a subcommand's flags, checks them and runs it until it ends
// or SIGINT or SIGTERM comes; the exit status is 0, 1 (an error, on
// stderr) or 2 (bad flags).
func sub(name string, args []string, stdout, stderr io.Writer, register func(*flag.FlagSet), check func() error, run func(context.Context) error) int {
	fs := flag.NewFlagSet("floodload "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "floodload %s: unexpected arguments %q\n", name, fs.Args())
		return 2
	}
	if err := check(); err != nil {
		fmt.Fprintf(stderr, "floodload %s: %v\n", name, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintf(stderr, "floodload %s: %v\n", name, err)
		return 1
	}
	return 0
}

// setFlags collects -set name=value flags.
type setFlags map[string]string

func (s setFlags) String() string { return "" }

func (s setFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want name=value, got %q", v)
	}
	s[name] = value
	return nil
}

func runPostfix(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floodload postfix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the instance (required)")
	port := fs.Int("port", 0, "SMTP port on 127.0.0.1 (required)")
	ownAnvil := fs.Bool("own-anvil", true, "run Postfix's own anvil (false: sluice's anvil door must listen on private/anvil)")
	screen := fs.Bool("postscreen", false, "postscreen(8) on the SMTP port, passing clients to smtpd")
	startTimeout := fs.Duration("start-timeout", 90*time.Second, "how long to wait for the instance to start")
	mainCF := setFlags{}
	fs.Var(mainCF, "set", "an extra main.cf parameter, name=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" || *port <= 0 || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "floodload postfix: -dir and -port are required, and nothing else")
		return 2
	}
	o := postfixtest.Options{Dir: *dir, SMTPPort: *port, OwnAnvil: *ownAnvil, MainCF: mainCF}
	return postfixrun.Run("floodload postfix", o, *startTimeout, stdin, stdout, stderr,
		func(inst *postfixtest.Instance) string {
			pid, err := masterPID(inst)
			if err == nil && *screen {
				err = usePostscreen(inst, *port, pid)
			}
			if err != nil {
				return "failed: " + err.Error()
			}
			return fmt.Sprintf("ready master=%d maillog=%s anvil=%s", pid, filepath.Join(*dir, "maillog"), inst.AnvilSocketPath())
		})
}

// masterPID is the instance's master pid, from its pid file.
func masterPID(inst *postfixtest.Instance) (int, error) {
	b, err := os.ReadFile(filepath.Join(inst.QueueDir(), "pid", "master.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// usePostscreen puts postscreen on the SMTP port (smtpd behind it as the
// "smtpd pass" service), has master reload master.cf, and waits for the
// reload in the maillog.
func usePostscreen(inst *postfixtest.Instance, port, master int) error {
	path := filepath.Join(inst.ConfigDir(), "master.cf")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	old := fmt.Sprintf("127.0.0.1:%d inet n - n - - smtpd\n", port)
	if !strings.Contains(string(b), old) {
		return fmt.Errorf("no line %q in %s", strings.TrimSpace(old), path)
	}
	screen := fmt.Sprintf("127.0.0.1:%d inet n - n - 1 postscreen\n", port) +
		"smtpd      pass - - n - - smtpd\n" +
		"dnsblog    unix - - n - 0 dnsblog\n" +
		"tlsproxy   unix - - n - 0 tlsproxy\n"
	b = []byte(strings.Replace(string(b), old, screen, 1))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	past := time.Now().Add(-time.Minute) // as postfixtest does: no re-read wait
	if err := os.Chtimes(path, past, past); err != nil {
		return err
	}
	if err := syscall.Kill(master, syscall.SIGHUP); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return inst.WaitLog(ctx, fmt.Sprintf("postfix/master[%d]: reload", master))
}
