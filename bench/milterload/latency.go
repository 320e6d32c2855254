package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

// runLatency measures one milter session at a time with pauses between
// its steps, as Postfix at one SMTP session at a time leaves its milter
// idle for milliseconds between packets: -n sessions to -socket, each
// dialling and negotiating (version 6, everything offered), a -gap pause,
// CONNECT (with the connect macros Postfix sends), a -gap pause, one
// message (the steps the milter asked for, then END-OF-MESSAGE), QUIT,
// and a -gap pause before the next. It prints the 10th, 50th and 90th
// percentile of each step's round trip, as the MTA waits for it:
//
//	sessions=<n> gap=<d> dial_neg_us=<p10>/<p50>/<p90> connect_us=... eom_us=... sum_us=...
//
// sum is the three waits of one session added. A milter that answers
// CONNECT later than another with the same EOM does more work at CONNECT,
// on a CPU whose caches the pause left cold.
func runLatency(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("milterload latency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the milter's unix socket (required)")
	n := fs.Int("n", 2000, "sessions")
	gap := fs.Duration("gap", 500*time.Microsecond, "the pause before each step and after each session")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *socket == "" || *n < 10 || *gap < 0 || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "milterload latency: -socket is required; -n at least 10; -gap not negative")
		return 2
	}
	var neg, conn, eom, sum []time.Duration
	for i := range *n {
		w, err := latencySession(*socket, *gap)
		if err != nil {
			fmt.Fprintf(stderr, "milterload latency: session %d: %v\n", i+1, err)
			return 1
		}
		neg, conn, eom = append(neg, w[0]), append(conn, w[1]), append(eom, w[2])
		sum = append(sum, w[0]+w[1]+w[2])
		time.Sleep(*gap)
	}
	fmt.Fprintf(stdout, "sessions=%d gap=%v dial_neg_us=%s connect_us=%s eom_us=%s sum_us=%s\n",
		*n, *gap, percentiles(neg), percentiles(conn), percentiles(eom), percentiles(sum))
	return 0
}

// latencySession runs one session and returns its three waits: dial and
// negotiation, CONNECT, and the message up to END-OF-MESSAGE's reply.
func latencySession(socket string, gap time.Duration) ([3]time.Duration, error) {
	var w [3]time.Duration
	t0 := time.Now()
	m, err := miltest.Dial("unix", socket)
	if err != nil {
		return w, err
	}
	defer m.Close()
	_ = m.Conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		return w, fmt.Errorf("negotiate: %w", err)
	}
	w[0] = time.Since(t0)
	time.Sleep(gap)
	t1 := time.Now()
	if err := m.Macro(wire.CmdConnect, "j", "mx.example.org", "{daemon_name}", "smtpd", "v", "Postfix 3.7.11"); err != nil {
		return w, fmt.Errorf("macros: %w", err)
	}
	r, err := m.Command(&wire.Connect{Host: "[192.0.2.1]", Family: wire.FamilyInet, Port: 4711, Addr: "192.0.2.1"})
	if err != nil {
		return w, fmt.Errorf("CONNECT: %w", err)
	}
	if r.Code() != wire.RespContinue {
		return w, fmt.Errorf("CONNECT answered %v", r.Code())
	}
	w[1] = time.Since(t1)
	time.Sleep(gap)
	t2 := time.Now()
	if _, final, err := m.Message("sender@example.org", "rcpt@example.net", []string{"From", "sender@example.org"}, "Hello.\r\n"); err != nil {
		return w, fmt.Errorf("message: %w", err)
	} else if final == nil {
		return w, fmt.Errorf("no answer to END-OF-MESSAGE")
	}
	w[2] = time.Since(t2)
	return w, m.Quit()
}

// percentiles formats the 10th, 50th and 90th percentile of d in
// microseconds, as p10/p50/p90.
func percentiles(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	var b strings.Builder
	for i, q := range []int{10, 50, 90} {
		if i > 0 {
			b.WriteByte('/')
		}
		fmt.Fprintf(&b, "%d", s[(len(s)-1)*q/100].Microseconds())
	}
	return b.String()
}
