// Command muxload is a load generator for mimedefang-multiplexor's main
// socket (sluice mux or the reference), connecting as the mimedefang milter
// does: a new UNIX-socket connection per request, a blocking connect (so a
// full listen backlog makes the client wait, not fail), one request line,
// then the reply read up to EOF.
//
// Each of -c clients loops over such requests. The command is -cmd:
//
//	relayok   relayok 192.0.2.<n> host<n>.example 25 127.0.0.1 25 NOQUEUE (worker reply "ok 1 ...")
//	scan      scan NOQUEUE <-scandir>      (worker reply "ok")
//	status    status                       (answered by the multiplexor itself)
//
// A request's latency (connect to EOF) is recorded if it lies wholly
// inside the measured period after -warmup.
//
// Each client blocks in the kernel as a thread of the C milter does, so
// muxload runs with at least one runtime processor (GOMAXPROCS) per client:
// with fewer, a client whose system call returns waits for a processor in
// the Go scheduler's queue, behind clients that keep cycling, and that
// wait, muxload's own, lands in the latencies. Under 64 clients sending
// status on 2 CPUs it made the p99 of every multiplexor (the floor's too)
// 45-100 ms and served the busiest client 3-6 times as often as the least;
// with a processor each, 1.1-1.7 times, and the floor's p99 fell to 3-4 ms
// (bench/results/2026-11-26-mux-notebook.md). The result is one line:
//
//	target=<label> cmd=<cmd> c=<c> reqs=<n> secs=<s> rps=<x> p50_us=<x> p99_us=<x> errors=<n> total=<n>
//
// or one JSON object with -json. reqs counts the requests of the measured
// period, total every request answered, warm-up included (the bench script
// divides the server's CPU time by it). A failed exchange or an unexpected reply
// (for example "error: No free workers") counts as an error; the exit
// status is 1 if there were errors. With -once LINE it sends LINE once,
// prints the raw reply and exits (the bench script polls status with it).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/bench/internal/errlog"
	"sluice/bench/internal/hist"
	"sluice/bench/internal/loadgen"
	"sluice/internal/percent"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// config holds the generator's settings.
type config struct {
	loadgen.Flags
	socket  string
	cmd     string
	scanDir string
	timeout time.Duration
	once    string
}

// result is what one run measured.
type result struct {
	Target string  `json:"target"`
	Cmd    string  `json:"cmd"`
	C      int     `json:"c"`
	Reqs   uint64  `json:"reqs"`
	Secs   float64 `json:"secs"`
	RPS    float64 `json:"rps"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	Errors uint64  `json:"errors"`
	Total  uint64  `json:"total"`
}

func (r result) String() string {
	return fmt.Sprintf("target=%s cmd=%s c=%d reqs=%d secs=%.3f rps=%.1f p50_us=%.1f p99_us=%.1f errors=%d total=%d",
		r.Target, r.Cmd, r.C, r.Reqs, r.Secs, r.RPS, r.P50us, r.P99us, r.Errors, r.Total)
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("muxload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.socket, "socket", "", "path of the multiplexor's main UNIX socket (required)")
	cfg.Register(fs, "number of concurrent clients", "mux")
	fs.StringVar(&cfg.cmd, "cmd", "relayok", "request: relayok, scan or status")
	fs.StringVar(&cfg.scanDir, "scandir", "", "work directory named in scan requests (required for -cmd scan)")
	fs.DurationVar(&cfg.timeout, "timeout", 60*time.Second, "per-request I/O timeout")
	fs.StringVar(&cfg.once, "once", "", "send this one request line, print the reply and exit")
	if !loadgen.Parse(fs, "muxload", args, stderr) {
		return 2
	}
	if cfg.once != "" {
		if cfg.socket == "" {
			fmt.Fprintln(stderr, "muxload: -socket is required")
			return 2
		}
		reply, err := exchange(cfg.socket, []byte(cfg.once+"\n"), make([]byte, 8192), cfg.timeout)
		if err != nil {
			fmt.Fprintf(stderr, "muxload: %v\n", err)
			return 1
		}
		_, _ = stdout.Write(reply)
		return 0
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "muxload: %v\n", err)
		return 2
	}
	if runtime.GOMAXPROCS(0) < cfg.Conns {
		runtime.GOMAXPROCS(cfg.Conns)
	}
	res := run(cfg, stderr)
	return loadgen.Print(stdout, stderr, "muxload", res, cfg.JSON, res.Errors > 0)
}

func (c *config) validate() error {
	switch {
	case c.socket == "":
		return errors.New("-socket is required")
	case len(c.socket) > 107:
		return errors.New("-socket path is longer than a UNIX socket address allows")
	case c.timeout <= 0:
		return errors.New("-timeout must be positive")
	case c.cmd == "scan" && c.scanDir == "":
		return errors.New("-cmd scan needs -scandir")
	case c.cmd != "relayok" && c.cmd != "scan" && c.cmd != "status":
		return fmt.Errorf("unknown -cmd %q (relayok, scan or status)", c.cmd)
	}
	return c.Check()
}

// requests returns the request lines a client cycles through, and the
// check of a reply.
func requests(cfg config, client int) ([][]byte, func([]byte) bool) {
	switch cfg.cmd {
	case "scan":
		// The directory is percent-encoded as the milter encodes it.
		return [][]byte{[]byte("scan NOQUEUE " + percent.Encode(cfg.scanDir) + "\n")},
			func(r []byte) bool { return string(r) == "ok\n" }
	case "status":
		return [][]byte{[]byte("status\n")}, validStatus
	}
	var lines [][]byte
	for i := range 16 {
		n := (client*16+i)%250 + 1
		lines = append(lines, fmt.Appendf(nil, "relayok 192.0.2.%d host%d.example 25 127.0.0.1 25 NOQUEUE\n", n, n))
	}
	return lines, func(r []byte) bool { return strings.HasPrefix(string(r), "ok 1 ") && r[len(r)-1] == '\n' }
}

// validStatus checks "<letters> <msgs> <activations> <qsize> <queued> <uptime>\n".
func validStatus(r []byte) bool {
	s, ok := strings.CutSuffix(string(r), "\n")
	f := strings.Split(s, " ")
	if !ok || len(f) != 6 || f[0] == "" || strings.Trim(f[0], "SIBK") != "" {
		return false
	}
	for _, n := range f[1:] {
		if n == "" || strings.Trim(n, "0123456789") != "" {
			return false
		}
	}
	return true
}

// run drives cfg.Conns clients until the warm-up and measured duration have
// passed and returns the merged result.
func run(cfg config, logw io.Writer) result {
	win := loadgen.NewWindow(cfg.Warmup, cfg.Duration)
	lg := errlog.New(logw, "muxload", 10)
	clients := make([]*client, cfg.Conns)
	var wg sync.WaitGroup
	for i := range clients {
		lines, check := requests(cfg, i)
		c := &client{socket: cfg.socket, lines: lines, check: check, timeout: cfg.timeout, win: win, log: lg}
		clients[i] = c
		wg.Go(c.run)
	}
	wg.Wait()
	var h hist.Hist
	res := result{Target: cfg.Label, Cmd: cfg.cmd, C: cfg.Conns, Secs: cfg.Duration.Seconds()}
	for _, c := range clients {
		h.Merge(&c.hist)
		res.Errors += c.errors
		res.Total += c.total
	}
	l := loadgen.Summarize(&h, res.Secs)
	res.Reqs, res.RPS, res.P50us, res.P99us = l.Reqs, l.RPS, l.P50us, l.P99us
	return res
}

// client sends one request at a time and keeps its own statistics.
type client struct {
	socket  string
	lines   [][]byte
	check   func([]byte) bool
	timeout time.Duration
	win     loadgen.Window
	log     *errlog.Log

	hist   hist.Hist
	errors uint64
	total  uint64 // answered requests, measured or not
}

func (c *client) run() {
	buf := make([]byte, 8192)
	for i := 0; time.Now().Before(c.win.End); i++ {
		line := c.lines[i%len(c.lines)]
		start := time.Now()
		reply, err := exchange(c.socket, line, buf, c.timeout)
		end := time.Now()
		if err == nil && !c.check(reply) {
			err = fmt.Errorf("unexpected reply %q", reply)
		}
		if err != nil {
			c.errors++
			c.log.Printf("%q: %v", strings.TrimSuffix(string(line), "\n"), err)
			continue
		}
		c.total++
		if c.win.Holds(start, end) {
			c.hist.Record(end.Sub(start))
		}
	}
}

// exchange is one request as the milter makes it: a blocking connect,
// the line written, the reply read up to EOF, the socket closed. It uses
// system calls directly, so each client blocks in the kernel as the C
// milter does. The reply is returned in buf (cut at len(buf)).
func exchange(path string, line, buf []byte, timeout time.Duration) ([]byte, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	defer syscall.Close(fd)
	// No timeout before connect: a blocking connect interrupted by a
	// signal is restarted only when the socket has none.
	sa := &syscall.SockaddrUnix{Name: path}
	err = syscall.Connect(fd, sa)
	for errors.Is(err, syscall.EINTR) {
		if err = syscall.Connect(fd, sa); errors.Is(err, syscall.EISCONN) {
			err = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("setsockopt: %w", err)
	}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("setsockopt: %w", err)
	}
	for w := line; len(w) > 0; {
		var n int
		err := retryEINTR(func() (err error) { n, err = syscall.Write(fd, w); return err })
		if err != nil {
			return nil, fmt.Errorf("write: %w", err)
		}
		w = w[n:]
	}
	got := 0
	for got < len(buf) {
		var n int
		err := retryEINTR(func() (err error) { n, err = syscall.Read(fd, buf[got:]); return err })
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) {
				return nil, fmt.Errorf("read: no reply within %v", timeout)
			}
			return nil, fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			break
		}
		got += n
	}
	return buf[:got], nil
}

func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
