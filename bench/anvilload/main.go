// Command anvilload is a load generator for servers that speak Postfix's
// anvil(8) protocol over a UNIX stream socket, as Postfix smtpd does.
//
// Each of -c persistent connections first checks the server's
// "protocol=anvil_protocol" announcement (Postfix >= 3.6), then loops over
// SMTP-like sessions: connect, one to three message requests each followed by
// one to three recipient requests, then disconnect. Every request is one
// round trip whose latency is measured after the -warmup period; the result
// is printed as one line:
//
//	target=<label> c=<c> reqs=<n> secs=<s> rps=<x> p50_us=<x> p99_us=<x> errors=<n>
//
// or as one JSON object with -json. Any failed or malformed exchange counts
// as an error; the exit status is 1 if there were errors.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"

	"sluice/bench/internal/errlog"
	"sluice/bench/internal/hist"
	"sluice/bench/internal/loadgen"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// config holds the generator's settings.
type config struct {
	loadgen.Flags
	socket  string
	clients int
	seed    uint64
}

// result is what one run measured.
type result struct {
	Target string  `json:"target"`
	C      int     `json:"c"`
	Reqs   uint64  `json:"reqs"`
	Secs   float64 `json:"secs"`
	RPS    float64 `json:"rps"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	Errors uint64  `json:"errors"`
}

func (r result) String() string {
	return fmt.Sprintf("target=%s c=%d reqs=%d secs=%.3f rps=%.1f p50_us=%.1f p99_us=%.1f errors=%d",
		r.Target, r.C, r.Reqs, r.Secs, r.RPS, r.P50us, r.P99us, r.Errors)
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("anvilload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.socket, "socket", "", "path of the anvil server's UNIX socket (required)")
	cfg.Register(fs, "number of concurrent persistent connections", "anvil")
	fs.IntVar(&cfg.clients, "clients", 1000, "number of distinct client addresses (idents smtp:10.X.Y.Z)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed for the choice of clients and request counts")
	if !loadgen.Parse(fs, "anvilload", args, stderr) {
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "anvilload: %v\n", err)
		return 2
	}
	res := run(cfg, stderr)
	return loadgen.Print(stdout, stderr, "anvilload", res, cfg.JSON, res.Errors > 0)
}

func (c *config) validate() error {
	switch {
	case c.socket == "":
		return errors.New("-socket is required")
	case c.clients < 1 || c.clients > 1<<24:
		return errors.New("-clients must be in [1, 16777216]")
	}
	return c.Check()
}

// Request kinds, in the order of the requests table.
const (
	reqConnect = iota
	reqMessage
	reqRecipient
	reqDisconnect
	numKinds
)

var kindNames = [numKinds]string{"connect", "message", "recipient", "disconnect"}

// replyAttrs lists, per request kind, the attribute names of the reply in
// the order Postfix's anvil sends them (and its client scans them).
var replyAttrs = [numKinds][]string{
	reqConnect:    {"status", "count", "rate"},
	reqMessage:    {"status", "rate"},
	reqRecipient:  {"status", "rate"},
	reqDisconnect: {"status"},
}

const announcement = "protocol=anvil_protocol\n"

// buildRequests returns the wire form of every request for every client, so
// the request loop only writes prebuilt bytes.
func buildRequests(clients int) [numKinds][][]byte {
	var reqs [numKinds][][]byte
	for k := range reqs {
		reqs[k] = make([][]byte, clients)
	}
	for i := range clients {
		a := i + 1
		ident := fmt.Sprintf("smtp:10.%d.%d.%d", a>>16&255, a>>8&255, a&255)
		for k := range reqs {
			reqs[k][i] = []byte("request=" + kindNames[k] + "\nident=" + ident + "\n\n")
		}
	}
	return reqs
}

// run drives cfg.Conns workers until the warm-up and measured duration have
// passed and returns the merged result. Errors are counted; the first few
// are described on logw.
func run(cfg config, logw io.Writer) result {
	reqs := buildRequests(cfg.clients)
	win := loadgen.NewWindow(cfg.Warmup, cfg.Duration)
	lg := errlog.New(logw, "anvilload", 10)

	workers := make([]*worker, cfg.Conns)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{
			socket:  cfg.socket,
			reqs:    &reqs,
			clients: cfg.clients,
			rng:     rand.New(rand.NewPCG(cfg.seed, uint64(i))),
			win:     win,
			log:     lg,
		}
		workers[i] = w
		wg.Go(w.run)
	}
	wg.Wait()

	var h hist.Hist
	res := result{Target: cfg.Label, C: cfg.Conns, Secs: cfg.Duration.Seconds()}
	for _, w := range workers {
		h.Merge(&w.hist)
		res.Errors += w.errors
	}
	l := loadgen.Summarize(&h, res.Secs)
	res.Reqs, res.RPS, res.P50us, res.P99us = l.Reqs, l.RPS, l.P50us, l.P99us
	return res
}

// worker owns one connection at a time and its own statistics.
type worker struct {
	socket  string
	reqs    *[numKinds][][]byte
	clients int
	rng     *rand.Rand
	win     loadgen.Window
	log     *errlog.Log

	conn *net.UnixConn
	r    *bufio.Reader

	hist   hist.Hist
	errors uint64
}

// graceAfterEnd bounds how long a request may hang after the measured
// period ends before it counts as failed.
const graceAfterEnd = 5 * time.Second

// announceTimeout bounds the wait for the server's announcement.
const announceTimeout = 2 * time.Second

func (w *worker) run() {
	defer w.close()
	for time.Now().Before(w.win.End) {
		if w.conn == nil {
			if err := w.dial(); err != nil {
				w.fail(err)
				time.Sleep(min(10*time.Millisecond, time.Until(w.win.End)))
				continue
			}
		}
		if err := w.session(); err != nil {
			w.fail(err)
			w.close()
		}
	}
}

func (w *worker) fail(err error) {
	w.errors++
	w.log.Printf("%v", err)
}

func (w *worker) close() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// dial connects and checks the server's protocol announcement.
func (w *worker) dial() error {
	c, err := net.DialTimeout("unix", w.socket, 2*time.Second)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	uc := c.(*net.UnixConn)
	if w.r == nil {
		w.r = bufio.NewReaderSize(uc, 4096)
	} else {
		w.r.Reset(uc)
	}
	w.conn = uc
	err = uc.SetDeadline(time.Now().Add(announceTimeout))
	if err == nil {
		err = w.readAnnouncement()
	}
	if err == nil {
		err = uc.SetDeadline(w.win.End.Add(graceAfterEnd))
	}
	if err != nil {
		w.close()
		return err
	}
	return nil
}

func (w *worker) readAnnouncement() error {
	line, err := w.r.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("reading announcement: %w", err)
	}
	if string(line) != announcement {
		return fmt.Errorf("bad announcement %q, want %q", line, announcement)
	}
	line, err = w.r.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("reading announcement: %w", err)
	}
	if len(line) != 1 {
		return fmt.Errorf("announcement not ended by an empty line: got %q", line)
	}
	return nil
}

// session runs one SMTP-like session for a random client.
func (w *worker) session() error {
	client := w.rng.IntN(w.clients)
	if err := w.do(reqConnect, client); err != nil {
		return err
	}
	for range 1 + w.rng.IntN(3) {
		if err := w.do(reqMessage, client); err != nil {
			return err
		}
		for range 1 + w.rng.IntN(3) {
			if err := w.do(reqRecipient, client); err != nil {
				return err
			}
		}
	}
	return w.do(reqDisconnect, client)
}

// do sends one request, reads and checks its reply, and records the round
// trip's latency if it lies wholly inside the measured period.
func (w *worker) do(kind, client int) error {
	start := time.Now()
	if _, err := w.conn.Write(w.reqs[kind][client]); err != nil {
		return fmt.Errorf("%s: write: %w", kindNames[kind], err)
	}
	if err := w.readReply(kind); err != nil {
		return fmt.Errorf("%s: %w", kindNames[kind], err)
	}
	end := time.Now()
	if w.win.Holds(start, end) {
		w.hist.Record(end.Sub(start))
	}
	return nil
}

// readReply reads one reply and checks it has exactly the attributes Postfix
// sends for kind, in order, with status=0 and positive counters.
func (w *worker) readReply(kind int) error {
	for _, name := range replyAttrs[kind] {
		line, err := w.r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("reading reply: %w", err)
		}
		v, ok := attrValue(line, name)
		if !ok {
			return fmt.Errorf("malformed reply line %q, want %s=<int>", line, name)
		}
		n, ok := parseInt(v)
		switch {
		case !ok:
			return fmt.Errorf("malformed reply line %q, want %s=<int>", line, name)
		case name == "status" && n != 0:
			return fmt.Errorf("reply status=%d", n)
		case name != "status" && n < 1:
			return fmt.Errorf("implausible reply %q", line)
		}
	}
	line, err := w.r.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("reading reply: %w", err)
	}
	if len(line) != 1 {
		return fmt.Errorf("reply not ended by an empty line: got %q", line)
	}
	return nil
}

// attrValue returns the value of a "name=value\n" line if its name is name.
func attrValue(line []byte, name string) ([]byte, bool) {
	if len(line) < len(name)+2 || string(line[:len(name)]) != name {
		return nil, false
	}
	rest := line[len(name):]
	if rest[0] != '=' || rest[len(rest)-1] != '\n' {
		return nil, false
	}
	return rest[1 : len(rest)-1], true
}

// parseInt parses an optionally negative decimal int without allocating.
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
