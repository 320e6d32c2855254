// Command policyload is a load generator for servers that speak Postfix's
// SMTPD access policy delegation protocol (check_policy_service) over TCP,
// as Postfix smtpd does.
//
// Each of -c persistent connections carries one request at a time: the
// request's "name=value" lines ended by an empty line, written with one
// write, then the reply read up to its empty line. A reply must carry
// action=...; other reply attributes are ignored, and a reply without an
// action, a line without "=", or a broken connection counts as an error
// (the connection is then closed and dialled again).
//
// The load imitates smtpd under check_policy_service in both
// smtpd_recipient_restrictions and smtpd_end_of_data_restrictions: each
// connection loops over SMTP sessions of a random client (one of -clients; a new
// client_port per session) with one to three messages from a random sender
// (one of -senders, user{i}@sender{i%100}.example), each message one RCPT
// request per recipient (one to three; recipient set, recipient_count=0),
// then one END-OF-MESSAGE request (recipient_count=N, the final size, the
// recipient only when N is 1). Requests carry Postfix 3.7's full attribute
// set and are about 900 bytes; instance is a fresh hex value per message,
// shared by its RCPT and END-OF-MESSAGE requests. One thread drives every
// connection (engine.go): a request's latency runs from its write to the
// return of the epoll_wait that reported its reply.
//
// Connections are made one at a time, each when the previous one has had
// its first reply (so a server with a short listen backlog sees no SYN
// storm), and each starts work at once; when all are made, the -warmup
// period runs unmeasured and then the -duration period is measured. The
// result is printed as one line:
//
//	target=<label> c=<c> reqs=<n> secs=<s> rps=<x> p50_us=<x> p99_us=<x> p999_us=<x> errors=<n> actions=<ACTION:count,...>
//
// or as one JSON object with -json. actions counts the measured replies by
// the first word of their action, in upper case, sorted by name. The exit
// status is 1 if there were errors.
//
// With -probe N, policyload instead checks that a server limits: on one
// connection it sends N single-recipient messages (an RCPT request, then an
// END-OF-MESSAGE request) from one sender (-probe-sender) and prints
//
//	target=<label> probe=<N> admitted=<n> refused=<n> first_refused=<i> refused_rcpt=<n> refused_eom=<n> errors=<n> first_action="..."
//
// A message is refused when one of its replies is a refusal (REJECT,
// DEFER, DEFER_IF_PERMIT, DEFER_IF_REJECT, or a 4NN/5NN code); after a
// refused RCPT, as in smtpd, no END-OF-MESSAGE request follows. The RCPT
// request is part of every probe message because some policy servers count
// only there.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"sluice/bench/internal/loadgen"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// config holds the generator's settings.
type config struct {
	loadgen.Flags
	addr        string
	clients     int
	senders     int
	seed        uint64
	probe       int
	probeSender string
	// grace bounds how long a request may hang after the measured period
	// ends before it counts as failed: graceAfterEnd unless a test sets it.
	grace time.Duration
}

// result is what one load run measured.
type result struct {
	Target  string            `json:"target"`
	C       int               `json:"c"`
	Reqs    uint64            `json:"reqs"`
	Secs    float64           `json:"secs"`
	RPS     float64           `json:"rps"`
	P50us   float64           `json:"p50_us"`
	P99us   float64           `json:"p99_us"`
	P999us  float64           `json:"p999_us"`
	Errors  uint64            `json:"errors"`
	Actions map[string]uint64 `json:"actions"`
}

func (r result) String() string {
	return fmt.Sprintf("target=%s c=%d reqs=%d secs=%.3f rps=%.1f p50_us=%.1f p99_us=%.1f p999_us=%.1f errors=%d actions=%s",
		r.Target, r.C, r.Reqs, r.Secs, r.RPS, r.P50us, r.P99us, r.P999us, r.Errors, formatActions(r.Actions))
}

// formatActions renders the action tally as ACTION:count pairs sorted by
// action; "-" if there are none.
func formatActions(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", name, m[name])
	}
	return b.String()
}

// probeResult is what a -probe run found.
type probeResult struct {
	Target       string `json:"target"`
	Probe        int    `json:"probe"`
	Admitted     int    `json:"admitted"`
	Refused      int    `json:"refused"`
	FirstRefused int    `json:"first_refused"` // 1-based message number; 0 if none
	RefusedRCPT  int    `json:"refused_rcpt"`
	RefusedEOM   int    `json:"refused_eom"`
	Errors       uint64 `json:"errors"`
	FirstAction  string `json:"first_action"` // the first refusal's whole action
}

func (p probeResult) String() string {
	return fmt.Sprintf("target=%s probe=%d admitted=%d refused=%d first_refused=%d refused_rcpt=%d refused_eom=%d errors=%d first_action=%q",
		p.Target, p.Probe, p.Admitted, p.Refused, p.FirstRefused, p.RefusedRCPT, p.RefusedEOM, p.Errors, p.FirstAction)
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("policyload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.addr, "addr", "", "host:port of the policy server (required)")
	cfg.Register(fs, "number of concurrent persistent connections", "policy")
	fs.IntVar(&cfg.clients, "clients", 1000, "number of distinct SMTP clients (address, names)")
	fs.IntVar(&cfg.senders, "senders", 1000, "number of distinct senders user{i}@sender{i%100}.example")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed for the choice of clients, senders, recipients and counts")
	fs.IntVar(&cfg.probe, "probe", 0, "instead of a load run, send this many one-recipient messages from -probe-sender on one connection and report how many were refused")
	fs.StringVar(&cfg.probeSender, "probe-sender", "probe@probe.example", "sender of the -probe messages")
	if !loadgen.Parse(fs, "policyload", args, stderr) {
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "policyload: %v\n", err)
		return 2
	}
	if cfg.probe > 0 {
		res := runProbe(cfg, stderr)
		return loadgen.Print(stdout, stderr, "policyload", res, cfg.JSON, res.Errors > 0)
	}
	res := run(cfg, stderr)
	return loadgen.Print(stdout, stderr, "policyload", res, cfg.JSON, res.Errors > 0)
}

func (c *config) validate() error {
	switch {
	case c.addr == "":
		return errors.New("-addr is required")
	case c.clients < 1 || c.clients > 1<<24:
		return errors.New("-clients must be in [1, 16777216]")
	case c.senders < 1:
		return errors.New("-senders must be at least 1")
	case c.probe < 0:
		return errors.New("-probe must not be negative")
	case strings.ContainsAny(c.probeSender, "\n\x00"):
		return errors.New("-probe-sender must not contain a newline or NUL")
	}
	return c.Check()
}

// numRecipients is the size of the recipient pool.
const numRecipients = 1000

const (
	// graceAfterEnd is config.grace's default.
	graceAfterEnd = 5 * time.Second
	// setupTimeout bounds a request made while the connections are still
	// being made.
	setupTimeout = time.Minute
)

// probeTimeout bounds a whole -probe run.
const probeTimeout = 2 * time.Minute

// runProbe sends cfg.probe one-recipient messages from the probe sender on
// one connection and reports which were refused.
func runProbe(cfg config, logw io.Writer) probeResult {
	res := probeResult{Target: cfg.Label, Probe: cfg.probe}
	p := buildParts(1, cfg.senders, cfg.probeSender)
	c, err := dial(cfg.addr)
	if err != nil {
		fmt.Fprintf(logw, "policyload: %v\n", err)
		res.Errors++
		return res
	}
	defer c.close()
	if err := c.c.SetDeadline(time.Now().Add(probeTimeout)); err != nil {
		fmt.Fprintf(logw, "policyload: %v\n", err)
		res.Errors++
		return res
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0))
	prefix := fmt.Appendf(nil, "%x.%x.", uint64(time.Now().UnixNano())&0xffffffff, 0xfffff)
	m := message{client: 0, sender: cfg.senders, n: 1}
	var buf, word []byte
	for i := 1; i <= cfg.probe; i++ {
		m.port = 1024 + rng.IntN(65536-1024)
		m.rcpts[0] = rng.IntN(numRecipients)
		m.size = 2000 + rng.IntN(98000)
		m.seq++
		refused := false
		// A refused recipient leaves the message without recipients, so
		// smtpd would not get to END-OF-MESSAGE.
		for _, eom := range []bool{false, true} {
			buf = p.appendRequest(buf[:0], &m, eom, 0, prefix, 0)
			act, err := c.roundTrip(buf)
			if err != nil {
				fmt.Fprintf(logw, "policyload: probe message %d: %v\n", i, err)
				res.Errors++
				return res
			}
			word = firstWord(word, act)
			if !isRefusal(word) {
				continue
			}
			if eom {
				res.RefusedEOM++
			} else {
				res.RefusedRCPT++
			}
			if res.FirstAction == "" {
				res.FirstAction = string(act)
			}
			refused = true
			break
		}
		if refused {
			res.Refused++
			if res.FirstRefused == 0 {
				res.FirstRefused = i
			}
		} else {
			res.Admitted++
		}
	}
	return res
}
