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
// worker loops over SMTP sessions of a random client (one of -clients; a new
// client_port per session) with one to three messages from a random sender
// (one of -senders, user{i}@sender{i%100}.example), each message one RCPT
// request per recipient (one to three; recipient set, recipient_count=0),
// then one END-OF-MESSAGE request (recipient_count=N, the final size, the
// recipient only when N is 1). Requests carry Postfix 3.7's full attribute
// set and are about 900 bytes; instance is a fresh hex value per message,
// shared by its RCPT and END-OF-MESSAGE requests.
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
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/bench/internal/hist"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// config holds the generator's settings.
type config struct {
	addr        string
	conns       int
	duration    time.Duration
	warmup      time.Duration
	clients     int
	senders     int
	label       string
	seed        uint64
	json        bool
	probe       int
	probeSender string
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
	fs.IntVar(&cfg.conns, "c", 1, "number of concurrent persistent connections")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured duration")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before the measured duration")
	fs.IntVar(&cfg.clients, "clients", 1000, "number of distinct SMTP clients (address, names)")
	fs.IntVar(&cfg.senders, "senders", 1000, "number of distinct senders user{i}@sender{i%100}.example")
	fs.StringVar(&cfg.label, "label", "policy", "target label printed in the result")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed for the choice of clients, senders, recipients and counts")
	fs.BoolVar(&cfg.json, "json", false, "print the result as one JSON object")
	fs.IntVar(&cfg.probe, "probe", 0, "instead of a load run, send this many one-recipient messages from -probe-sender on one connection and report how many were refused")
	fs.StringVar(&cfg.probeSender, "probe-sender", "probe@probe.example", "sender of the -probe messages")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "policyload: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "policyload: %v\n", err)
		return 2
	}
	var (
		out    any
		failed bool
	)
	if cfg.probe > 0 {
		res := runProbe(cfg, stderr)
		out, failed = res, res.Errors > 0
	} else {
		res := run(cfg, stderr)
		out, failed = res, res.Errors > 0
	}
	if cfg.json {
		b, err := json.Marshal(out)
		if err != nil {
			fmt.Fprintf(stderr, "policyload: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintln(stdout, out)
	}
	if failed {
		return 1
	}
	return 0
}

func (c *config) validate() error {
	switch {
	case c.addr == "":
		return errors.New("-addr is required")
	case c.conns < 1:
		return errors.New("-c must be at least 1")
	case c.duration <= 0:
		return errors.New("-duration must be positive")
	case c.warmup < 0:
		return errors.New("-warmup must not be negative")
	case c.clients < 1 || c.clients > 1<<24:
		return errors.New("-clients must be in [1, 16777216]")
	case c.senders < 1:
		return errors.New("-senders must be at least 1")
	case c.probe < 0:
		return errors.New("-probe must not be negative")
	case strings.ContainsAny(c.probeSender, "\n\x00"):
		return errors.New("-probe-sender must not contain a newline or NUL")
	}
	return nil
}

// numRecipients is the size of the recipient pool.
const numRecipients = 1000

// parts holds the prebuilt pieces every request is assembled from, in the
// order Postfix 3.7 sends the attributes, so that building a request only
// copies bytes into a reused buffer.
type parts struct {
	headRCPT, headEOM []byte   // request, protocol_state, protocol_name
	clientA           [][]byte // client_address, client_name, "client_port="
	clientB           [][]byte // reverse_client_name, server_*, helo_name
	sender            [][]byte // "sender=...\n"
	recipient         [][]byte // the address only
	tail              []byte   // etrn_domain ... mail_version, empty line
}

func buildParts(clients, senders int, probeSender string) *parts {
	p := &parts{
		headRCPT: []byte("request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n"),
		headEOM:  []byte("request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nprotocol_name=ESMTP\n"),
		tail: []byte("etrn_domain=\nstress=\nsasl_method=\nsasl_username=\nsasl_sender=\n" +
			"ccert_subject=\nccert_issuer=\nccert_fingerprint=\nccert_pubkey_fingerprint=\n" +
			"encryption_protocol=TLSv1.3\nencryption_cipher=TLS_AES_256_GCM_SHA384\nencryption_keysize=256\n" +
			"policy_context=\ncompatibility_level=3.6\nmail_version=3.7.11\n\n"),
	}
	p.clientA = make([][]byte, clients)
	p.clientB = make([][]byte, clients)
	for i := range clients {
		a := i + 1
		addr := fmt.Sprintf("10.%d.%d.%d", a>>16&255, a>>8&255, a&255)
		name := fmt.Sprintf("outbound-relay-%04d.mail-cluster-%02d.customer-%04d.hosting-provider.example", i, i%16, i)
		p.clientA[i] = []byte("client_address=" + addr + "\nclient_name=" + name + "\nclient_port=")
		p.clientB[i] = []byte("\nreverse_client_name=" + name +
			"\nserver_address=192.0.2.25\nserver_port=25\nhelo_name=" + name + "\n")
	}
	p.sender = make([][]byte, senders, senders+1)
	for i := range senders {
		p.sender[i] = fmt.Appendf(nil, "sender=user%d@sender%d.example\n", i, i%100)
	}
	// The probe sender is the last entry, past the load's senders.
	p.sender = append(p.sender, []byte("sender="+probeSender+"\n"))
	p.recipient = make([][]byte, numRecipients)
	for i := range numRecipients {
		p.recipient[i] = fmt.Appendf(nil, "firstname.lastname.%04d@mail.recipient-domain-%03d.example.org", i, i%300)
	}
	return p
}

// message describes one simulated message.
type message struct {
	client int
	port   int
	sender int
	rcpts  [3]int
	n      int    // number of recipients, 1..3
	size   int    // final size; the MAIL FROM SIZE= value is a bit smaller
	seq    uint64 // per-worker message number, for instance and queue_id
}

// appendRequest appends the wire form of one request about m to dst: an
// RCPT request for recipient k (0-based) if eom is false, else the
// END-OF-MESSAGE request.
func (p *parts) appendRequest(dst []byte, m *message, eom bool, k int, instPrefix []byte, worker int) []byte {
	if eom {
		dst = append(dst, p.headEOM...)
	} else {
		dst = append(dst, p.headRCPT...)
	}
	dst = append(dst, p.clientA[m.client]...)
	dst = strconv.AppendInt(dst, int64(m.port), 10)
	dst = append(dst, p.clientB[m.client]...)
	dst = append(dst, p.sender[m.sender]...)
	dst = append(dst, "recipient="...)
	switch {
	case !eom:
		dst = append(dst, p.recipient[m.rcpts[k]]...)
	case m.n == 1:
		dst = append(dst, p.recipient[m.rcpts[0]]...)
	}
	dst = append(dst, "\nrecipient_count="...)
	if eom {
		dst = strconv.AppendInt(dst, int64(m.n), 10)
	} else {
		dst = append(dst, '0')
	}
	// With smtpd_delay_open_until_valid_rcpt (the default), the queue file,
	// and so the queue ID, exists only after the first accepted recipient.
	dst = append(dst, "\nqueue_id="...)
	if eom || k > 0 {
		dst = appendQueueID(dst, uint64(worker)<<28|m.seq&(1<<28-1))
	}
	dst = append(dst, "\ninstance="...)
	dst = append(dst, instPrefix...)
	dst = strconv.AppendUint(dst, m.seq, 16)
	dst = append(dst, ".0\nsize="...)
	if eom {
		dst = strconv.AppendInt(dst, int64(m.size), 10)
	} else {
		dst = strconv.AppendInt(dst, int64(m.size-m.size/64), 10)
	}
	dst = append(dst, '\n')
	return append(dst, p.tail...)
}

// appendQueueID appends v as a short Postfix queue ID: 10 upper-case hex
// digits.
func appendQueueID(dst []byte, v uint64) []byte {
	const digits = "0123456789ABCDEF"
	for shift := 36; shift >= 0; shift -= 4 {
		dst = append(dst, digits[v>>uint(shift)&15])
	}
	return dst
}

// errLog describes at most left errors, then stays quiet.
type errLog struct {
	mu   sync.Mutex
	w    io.Writer
	left int
	skip atomic.Bool
}

func (l *errLog) printf(format string, args ...any) {
	if l.skip.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left <= 0 {
		l.skip.Store(true)
		fmt.Fprintf(l.w, "policyload: further errors not shown\n")
		return
	}
	l.left--
	fmt.Fprintf(l.w, "policyload: "+format+"\n", args...)
}

// tally counts actions by their first word. A handful of distinct words is
// expected, so a slice searched linearly beats a map and never allocates
// once every word has been seen.
type tally struct {
	words [][]byte
	n     []uint64
}

func (t *tally) add(word []byte) {
	for i, w := range t.words {
		if bytes.Equal(w, word) {
			t.n[i]++
			return
		}
	}
	t.words = append(t.words, bytes.Clone(word))
	t.n = append(t.n, 1)
}

func (t *tally) mergeInto(m map[string]uint64) {
	for i, w := range t.words {
		m[string(w)] += t.n[i]
	}
}

// conn is one persistent policy connection with its reply parser.
type conn struct {
	c   net.Conn
	r   *bufio.Reader
	act []byte // the current reply's action value, copied out of r
}

// dialTimeout bounds connection set-up; a dropped SYN is sent again after
// 1 s, then 2 s, then 4 s.
const dialTimeout = 10 * time.Second

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 4096), act: make([]byte, 0, 256)}, nil
}

func (c *conn) close() { _ = c.c.Close() }

// roundTrip writes req with one write and reads the reply; it returns the
// action value, valid until the next call.
func (c *conn) roundTrip(req []byte) ([]byte, error) {
	if _, err := c.c.Write(req); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	return c.readReply()
}

// readReply reads one reply up to its empty line and returns the value of
// its (first) action attribute.
func (c *conn) readReply() ([]byte, error) {
	c.act = c.act[:0]
	seen := false
	for {
		line, err := c.r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, fmt.Errorf("reply line longer than %d bytes", c.r.Size())
		case err != nil:
			return nil, fmt.Errorf("reading reply: %w", err)
		}
		if len(line) == 1 {
			break
		}
		eq := bytes.IndexByte(line, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("malformed reply line %q", line)
		}
		if !seen && string(line[:eq]) == "action" {
			seen = true
			c.act = append(c.act, line[eq+1:len(line)-1]...)
		}
	}
	if !seen {
		return nil, errors.New("reply without action")
	}
	if len(bytes.TrimSpace(c.act)) == 0 {
		return nil, errors.New("reply with an empty action")
	}
	return c.act, nil
}

// firstWord returns the action's first word in upper case, written into
// buf.
func firstWord(buf, action []byte) []byte {
	action = bytes.TrimLeft(action, " \t")
	if i := bytes.IndexAny(action, " \t"); i >= 0 {
		action = action[:i]
	}
	buf = buf[:0]
	for _, ch := range action {
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		buf = append(buf, ch)
	}
	return buf
}

// isRefusal tells whether an action's first word (upper case) refuses or
// defers the request.
func isRefusal(word []byte) bool {
	switch string(word) {
	case "REJECT", "DEFER", "DEFER_IF_PERMIT", "DEFER_IF_REJECT":
		return true
	}
	return len(word) == 3 && (word[0] == '4' || word[0] == '5') &&
		'0' <= word[1] && word[1] <= '9' && '0' <= word[2] && word[2] <= '9'
}

// window is a run's measured period. Until every connection is made it
// lies in the far future: nothing is measured and no worker stops.
type window struct{ start, end time.Time }

// run makes cfg.conns connections one at a time, starting each one's
// worker as soon as it is connected; once all are made, the -warmup period
// and then the measured -duration begin. It returns the merged result.
// Errors are counted; the first few are described on logw.
//
// Connecting one at a time, each after the previous one got its first
// reply, spares a server that accepts slowly: with a listen backlog of 5,
// connections made faster than it accepts them overflow its accept queue,
// and each dropped SYN costs the client a second or more. Starting work at
// once means no connection sits idle while the others are made, as some
// servers close idle connections. Dialling and the warm-up are not
// measured.
func run(cfg config, logw io.Writer) result {
	p := buildParts(cfg.clients, cfg.senders, cfg.probeSender)
	lg := &errLog{w: logw, left: 10}
	nonce := uint64(time.Now().UnixNano())
	far := time.Now().Add(100 * 365 * 24 * time.Hour)
	var win atomic.Pointer[window]
	win.Store(&window{start: far, end: far})

	workers := make([]*worker, cfg.conns)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{
			addr:   cfg.addr,
			parts:  p,
			cfg:    &cfg,
			idx:    i,
			rng:    rand.New(rand.NewPCG(cfg.seed, uint64(i))),
			win:    &win,
			log:    lg,
			buf:    make([]byte, 0, 2048),
			word:   make([]byte, 0, 64),
			prefix: fmt.Appendf(nil, "%x.%x.", nonce&0xffffffff, 0x10000+i),
		}
		w.ready = make(chan struct{})
		if err := w.connect(); err != nil {
			w.fail(err) // the worker tries again
		}
		workers[i] = w
		wg.Go(w.run)
		// The first reply shows the server has accepted this connection.
		select {
		case <-w.ready:
		case <-time.After(dialTimeout):
		}
	}
	start := time.Now().Add(cfg.warmup)
	win.Store(&window{start: start, end: start.Add(cfg.duration)})
	wg.Wait()

	var h hist.Hist
	res := result{Target: cfg.label, C: cfg.conns, Secs: cfg.duration.Seconds(), Actions: map[string]uint64{}}
	for _, w := range workers {
		h.Merge(&w.hist)
		res.Errors += w.errors
		w.actions.mergeInto(res.Actions)
	}
	res.Reqs = h.Count()
	res.RPS = float64(res.Reqs) / res.Secs
	res.P50us = float64(h.Quantile(0.50)) / 1e3
	res.P99us = float64(h.Quantile(0.99)) / 1e3
	res.P999us = float64(h.Quantile(0.999)) / 1e3
	return res
}

const (
	// graceAfterEnd bounds how long a request may hang after the measured
	// period ends before it counts as failed.
	graceAfterEnd = 5 * time.Second
	// setupTimeout bounds a request made while the connections are still
	// being made.
	setupTimeout = time.Minute
)

// worker owns one connection at a time and its own statistics.
type worker struct {
	addr  string
	parts *parts
	cfg   *config
	idx   int
	rng   *rand.Rand
	win   *atomic.Pointer[window]
	log   *errLog

	ready     chan struct{} // closed at the first reply, error or exit
	readyOnce sync.Once

	conn   *conn
	armed  bool   // conn's deadline follows the measured period
	buf    []byte // the request being sent
	word   []byte // the current reply's first action word
	prefix []byte // instance prefix, unique to this worker and run
	msg    message

	hist    hist.Hist
	actions tally
	errors  uint64
}

// connect dials a new connection and sets its deadline.
func (w *worker) connect() error {
	c, err := dial(w.addr)
	if err != nil {
		return err
	}
	w.conn, w.armed = c, false
	if err := w.arm(); err != nil {
		w.close()
		return err
	}
	return nil
}

// arm sets the connection's deadline: a grace period after the measured
// period if that is known, else setupTimeout from now.
func (w *worker) arm() error {
	win := w.win.Load()
	if w.armed {
		return nil
	}
	d := time.Now().Add(setupTimeout)
	if win.start.Before(d) {
		d, w.armed = win.end.Add(graceAfterEnd), true
	}
	return w.conn.c.SetDeadline(d)
}

// setReady closes w.ready once.
func (w *worker) setReady() {
	w.readyOnce.Do(func() {
		if w.ready != nil {
			close(w.ready)
		}
	})
}

func (w *worker) run() {
	defer w.setReady()
	defer w.close()
	for time.Now().Before(w.win.Load().end) {
		if w.conn == nil {
			if err := w.connect(); err != nil {
				w.fail(err)
				time.Sleep(min(10*time.Millisecond, time.Until(w.win.Load().end)))
				continue
			}
		}
		err := w.arm()
		if err == nil {
			err = w.session()
		}
		if err != nil {
			w.fail(err)
			w.close()
		}
	}
}

func (w *worker) fail(err error) {
	w.setReady()
	w.errors++
	w.log.printf("%v", err)
}

func (w *worker) close() {
	if w.conn != nil {
		w.conn.close()
		w.conn = nil
	}
}

// session runs one SMTP session: one to three messages of one client.
func (w *worker) session() error {
	m := &w.msg
	m.client = w.rng.IntN(w.cfg.clients)
	m.port = 1024 + w.rng.IntN(65536-1024)
	for range 1 + w.rng.IntN(3) {
		m.sender = w.rng.IntN(w.cfg.senders)
		m.n = 1 + w.rng.IntN(3)
		for k := range m.n {
			m.rcpts[k] = w.rng.IntN(numRecipients)
		}
		m.size = 2000 + w.rng.IntN(98000)
		m.seq++
		for k := range m.n {
			if done, err := w.do(false, k); done || err != nil {
				return err
			}
		}
		if done, err := w.do(true, 0); done || err != nil {
			return err
		}
	}
	return nil
}

// do sends one request about the current message and reads its reply; it
// records the round trip's latency and action if the round trip lies
// wholly inside the measured period, and reports whether that period is
// over.
func (w *worker) do(eom bool, k int) (done bool, err error) {
	w.buf = w.parts.appendRequest(w.buf[:0], &w.msg, eom, k, w.prefix, w.idx)
	start := time.Now()
	act, err := w.conn.roundTrip(w.buf)
	if err != nil {
		if eom {
			return false, fmt.Errorf("END-OF-MESSAGE: %w", err)
		}
		return false, fmt.Errorf("RCPT: %w", err)
	}
	end := time.Now()
	win := w.win.Load()
	if win.start.After(end) {
		w.setReady() // setting up: the first reply unblocks the next dial
	} else if !end.After(win.end) && !start.Before(win.start) {
		w.hist.Record(end.Sub(start))
		w.word = firstWord(w.word, act)
		w.actions.add(w.word)
	}
	return end.After(win.end), nil
}

// probeTimeout bounds a whole -probe run.
const probeTimeout = 2 * time.Minute

// runProbe sends cfg.probe one-recipient messages from the probe sender on
// one connection and reports which were refused.
func runProbe(cfg config, logw io.Writer) probeResult {
	res := probeResult{Target: cfg.label, Probe: cfg.probe}
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
