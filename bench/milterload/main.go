// Command milterload is the Go side of bench/milter.sh, and the milter
// load of scripts/soak.sh.
//
// "milterload postfix" runs a private Postfix instance (built on
// internal/testutil/postfixtest) with an SMTP listener on 127.0.0.1:-port
// and extra main.cf parameters (-set name=value, repeatable), for example
// smtpd_milters. Once the instance is up it prints one line,
//
//	ready maillog=<path>
//
// and stays up until SIGINT or SIGTERM, or until stdin reaches end of file
// when stdin is a pipe; it then stops the instance. It must run as root.
//
// "milterload steps -socket S" negotiates with the milter at S (version 6,
// every action and step offered, as Postfix does), hangs up, and prints
// the steps the milter asked for:
//
//	steps=connect,helo,mail,rcpt,data,header,eoh,body
//
// (end of message is always sent; "unknown" is listed when asked for).
//
// "milterload idle" measures the memory of idle milter sessions: it reads
// the resident set size (VmRSS) of the milter process -pid, opens -n milter
// connections to -socket that each negotiate (version 6, all actions and
// steps offered, as Postfix does) and send CONNECT for a distinct client
// address, as an MTA does at the start of an SMTP session, then leaves them
// idle, waits until the process's RSS settles and reads it again. It prints
//
//	sessions=<n> rss_before_kib=<k> rss_after_kib=<k> per_session_bytes=<b> rss_closed_kib=<k>
//
// where per_session_bytes is (after - before) / n and rss_closed_kib the
// RSS once all the sessions are closed again. Each connection needs a file
// descriptor on both sides: raise "ulimit -n" of both processes.
//
// "milterload sessions" drives whole milter sessions for a while (see
// runSessions).
//
// "milterload latency" measures each step's round trip, one session at a
// time with pauses between the steps, as Postfix at c=1 paces its milter
// (see runLatency).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"sluice/bench/internal/postfixrun"
	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
	"sluice/internal/testutil/postfixtest"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func realMain(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: milterload postfix|steps|idle|sessions|latency [flags]")
		return 2
	}
	switch args[0] {
	case "postfix":
		return runPostfix(args[1:], stdin, stdout, stderr)
	case "idle":
		return runIdle(args[1:], stdout, stderr)
	case "steps":
		return runSteps(args[1:], stdout, stderr)
	case "sessions":
		return runSessions(args[1:], stdout, stderr)
	case "latency":
		return runLatency(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "milterload: unknown subcommand %q (want postfix, steps, idle, sessions or latency)\n", args[0])
		return 2
	}
}

// params collects repeated -set name=value flags.
type params map[string]string

func (p params) String() string { return fmt.Sprint(map[string]string(p)) }

func (p params) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q is not name=value", s)
	}
	p[strings.TrimSpace(name)] = strings.TrimSpace(value)
	return nil
}

func runPostfix(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("milterload postfix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the instance (required)")
	port := fs.Int("port", 0, "SMTP port on 127.0.0.1 (required)")
	startTimeout := fs.Duration("start-timeout", 60*time.Second, "how long to wait for the instance to start")
	mainCF := params{}
	fs.Var(mainCF, "set", "main.cf parameter name=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || *port <= 0 || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "milterload postfix: -dir and -port are required, and nothing else")
		return 2
	}
	o := postfixtest.Options{Dir: *dir, SMTPPort: *port, OwnAnvil: true, MainCF: mainCF}
	return postfixrun.Run("milterload postfix", o, *startTimeout, stdin, stdout, stderr,
		func(*postfixtest.Instance) string { return "ready maillog=" + *dir + "/maillog" })
}

func runIdle(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("milterload idle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the milter's unix socket (required)")
	n := fs.Int("n", 10000, "idle sessions to open")
	pid := fs.Int("pid", 0, "pid of the milter process whose RSS is read (required)")
	par := fs.Int("parallel", 32, "connections opened at a time")
	settle := fs.Duration("settle", 10*time.Second, "longest wait for the RSS to settle")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || *pid <= 0 || *n < 1 || *par < 1 || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "milterload idle: -socket and -pid are required, -n and -parallel at least 1")
		return 2
	}
	r, err := idle(*socket, *n, *pid, *par, *settle)
	if err != nil {
		fmt.Fprintf(stderr, "milterload idle: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, r)
	return 0
}

func runSteps(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("milterload steps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the milter's unix socket (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "milterload steps: -socket is required, and nothing else")
		return 2
	}
	st, err := steps(*socket)
	if err != nil {
		fmt.Fprintf(stderr, "milterload steps: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "steps=%s\n", st)
	return 0
}

// stepFlags are the steps a milter may ask the MTA to leave out.
var stepFlags = []struct {
	name string
	no   wire.Protocol
}{
	{"connect", wire.ProtoNoConnect}, {"helo", wire.ProtoNoHelo}, {"mail", wire.ProtoNoMail},
	{"rcpt", wire.ProtoNoRcpt}, {"data", wire.ProtoNoData}, {"header", wire.ProtoNoHeaders},
	{"eoh", wire.ProtoNoEOH}, {"body", wire.ProtoNoBody}, {"unknown", wire.ProtoNoUnknown},
}

// steps negotiates with the milter at socket and lists the steps it
// asked for.
func steps(socket string) (string, error) {
	m, err := miltest.Dial("unix", socket)
	if err != nil {
		return "", err
	}
	defer m.Close()
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		return "", fmt.Errorf("negotiate: %w", err)
	}
	var names []string
	for _, f := range stepFlags {
		if m.Neg.Protocol&f.no == 0 {
			names = append(names, f.name)
		}
	}
	return strings.Join(names, ","), nil
}

// idleResult is what an idle run measured.
type idleResult struct {
	sessions                 int
	before, after, closedKiB int64
}

func (r idleResult) String() string {
	return fmt.Sprintf("sessions=%d rss_before_kib=%d rss_after_kib=%d per_session_bytes=%.0f rss_closed_kib=%d",
		r.sessions, r.before, r.after, float64(r.after-r.before)*1024/float64(r.sessions), r.closedKiB)
}

func idle(socket string, n, pid, par int, settle time.Duration) (idleResult, error) {
	res := idleResult{sessions: n}
	var err error
	if res.before, err = rssKiB(pid); err != nil {
		return res, err
	}
	mtas := make([]*miltest.MTA, n)
	defer func() {
		for _, m := range mtas {
			if m != nil {
				m.Close()
			}
		}
	}()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range par {
		wg.Go(func() {
			for i := range next {
				m, err := openSession(socket, i)
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("session %d: %w", i+1, err)
				}
				mtas[i] = m
				mu.Unlock()
			}
		})
	}
	for i := range n {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return res, first
	}
	if res.after, err = settledRSS(pid, settle); err != nil {
		return res, err
	}
	for i, m := range mtas {
		m.Close()
		mtas[i] = nil
	}
	if res.closedKiB, err = settledRSS(pid, settle); err != nil {
		return res, err
	}
	return res, nil
}

// openSession connects, negotiates and sends CONNECT for client i
// (10.x.y.z), expecting CONTINUE.
func openSession(socket string, i int) (*miltest.MTA, error) {
	m, err := miltest.Dial("unix", socket)
	if err != nil {
		return nil, err
	}
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		m.Close()
		return nil, fmt.Errorf("negotiate: %w", err)
	}
	addr := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	r, err := m.Command(&wire.Connect{Host: "[" + addr + "]", Family: wire.FamilyInet, Port: uint16(1024 + i%60000), Addr: addr})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	if r.Code() != wire.RespContinue {
		m.Close()
		return nil, fmt.Errorf("connect: the milter answered %v, want continue", r.Code())
	}
	return m, nil
}

// settledRSS polls the RSS of pid every 250 ms until two readings a
// second apart differ by less than 0.5%, or for at most limit, and
// returns the last reading.
func settledRSS(pid int, limit time.Duration) (int64, error) {
	deadline := time.Now().Add(limit)
	var hist []int64
	for {
		v, err := rssKiB(pid)
		if err != nil {
			return 0, err
		}
		hist = append(hist, v)
		if k := len(hist); k > 4 {
			d := hist[k-1] - hist[k-5]
			if d < 0 {
				d = -d
			}
			if d*200 < hist[k-1] {
				return v, nil
			}
		}
		if time.Now().After(deadline) {
			return v, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// rssKiB reads VmRSS of pid from /proc.
func rssKiB(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pid %d: VmRSS %q: %w", pid, rest, err)
			}
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("pid " + strconv.Itoa(pid) + ": no VmRSS in /proc status")
}
