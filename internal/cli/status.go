package cli

// `sluice status`: the status page of a running daemon as text. It reads
// /status.json from the daemon's [web] listener (found in the config, or
// named with -u) and prints the same facts the page shows, compactly.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sluice/internal/config"
	"sluice/internal/sockaccess"
	"sluice/internal/status"
)

// maxStatusBody caps the /status.json read (the server trims its lists,
// so a real answer is far smaller).
const maxStatusBody = 8 << 20

// Rows of the text view; the JSON has the full lists.
const (
	statusTalkers  = 10
	statusRefusals = 10
	statusSlots    = 64 // slot letters shown before "+N"
)

// statusCmd is `sluice status`: it finds the daemon's web listener (-u,
// or [web] listen in the config; each listener is tried in turn), reads
// /status.json and prints it as text, or as it came with -json. It exits
// 1 when no listener is configured or none answers with a status.
func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", stderr)
	path := fs.String("c", "", "configuration `file` whose [web] listen finds the daemon (default: the embedded defaults)")
	rawURL := fs.String("u", "", "the daemon's web `address`: http://HOST:PORT, unix:PATH or inet:HOST:PORT (overrides -c)")
	asJSON := fs.Bool("json", false, "print the raw /status.json")
	timeout := fs.Duration("t", 5*time.Second, "give up after this `duration`")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice status: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 2
	}
	var targets []string
	if *rawURL != "" {
		targets = []string{*rawURL}
	} else {
		cfg, errs := loadConfig(*path)
		if len(errs) > 0 {
			for _, e := range errs {
				fmt.Fprintln(stderr, e)
			}
			fmt.Fprintln(stderr, "sluice status: the configuration has errors")
			return 1
		}
		if len(cfg.Web.Listen) == 0 {
			src := "the embedded defaults have none"
			if *path != "" {
				src = *path + " has none"
			}
			fmt.Fprintf(stderr, "sluice status needs [web] listen in the config (%s); or name the address with -u\n", src)
			return 1
		}
		for _, l := range cfg.Web.Listen {
			targets = append(targets, listenTarget(cfg, l))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var body []byte
	var from string // the target that answered
	var errs []error
	for _, target := range targets {
		b, err := fetchStatus(ctx, target)
		if err == nil {
			body, from = b, target
			break
		}
		errs = append(errs, err)
	}
	if body == nil {
		for _, err := range errs {
			fmt.Fprintf(stderr, "sluice status: %v\n", err)
		}
		fmt.Fprintln(stderr, "sluice status: cannot reach the daemon; is `sluice serve` running with this configuration?")
		return 1
	}
	var st status.Status
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(stderr, "sluice status: %s did not answer with a status: %v\n", from, err)
		return 1
	}
	if *asJSON {
		// As it came, but laid out by json.Compact and with what a
		// terminal could act on escaped inside its strings (safeJSON):
		// the keys and replies in it come from peers.
		var c bytes.Buffer
		if err := json.Compact(&c, body); err != nil {
			fmt.Fprintf(stderr, "sluice status: %s did not answer with a status: %v\n", from, err)
			return 1
		}
		c.WriteByte('\n')
		_, _ = stdout.Write(safeJSON(c.Bytes()))
		return 0
	}
	writeStatus(stdout, &st)
	return 0
}

// listenTarget turns a [web] listen spec into an address for fetchStatus:
// a unix socket under the state directory, or the HTTP address with a
// wildcard host replaced by loopback.
func listenTarget(cfg *config.Config, spec string) string {
	network, addr, err := config.ParseListen(spec)
	if err != nil {
		return spec
	}
	if network == "unix" {
		return "unix:" + cfg.Path(addr)
	}
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// fetchStatus GETs /status.json from target: "unix:PATH",
// "inet:HOST:PORT", "http://HOST:PORT[/prefix]" or "HOST:PORT".
func fetchStatus(ctx context.Context, target string) ([]byte, error) {
	// No keep-alive (one request), and no proxy from the environment (a
	// zero Transport's Proxy is nil): the daemon is local.
	tr := &http.Transport{DisableKeepAlives: true}
	base := target
	switch {
	case strings.HasPrefix(target, "unix:"):
		sock := strings.TrimPrefix(target, "unix:")
		if sock == "" {
			return nil, fmt.Errorf("%q: empty socket path", target)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			return c, sockaccess.Explain(sock, err, "[web.socket] group and mode in sluice.toml")
		}
		base = "http://sluice"
	case strings.HasPrefix(target, "inet:"):
		base = "http://" + strings.TrimPrefix(target, "inet:")
	case !strings.Contains(target, "://"):
		base = "http://" + target
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q: want http://HOST:PORT, unix:PATH or inet:HOST:PORT", target)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/status.json"
	u.RawQuery, u.Fragment = "", ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: %w", target, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: GET %s: %s", target, u.Path, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the status: %w", target, err)
	}
	if len(b) > maxStatusBody {
		return nil, fmt.Errorf("%s: the status is larger than %d bytes", target, maxStatusBody)
	}
	return b, nil
}

// writeStatus prints st as text: a header, then one block per part of
// the status page. Everything a peer could have chosen (keys, replies,
// tags) is made safe for a terminal.
func writeStatus(w io.Writer, st *status.Status) {
	now := st.Now
	ago := func(t time.Time) string { return status.Duration(now.Sub(t)) }

	head := "sluice"
	if st.Version != "" {
		head += " " + status.Safe(st.Version)
	}
	if !st.Started.IsZero() {
		head += " · up " + ago(st.Started)
	}
	if r := st.Reload; r.Generation > 0 {
		head += " · config generation " + strconv.Itoa(r.Generation)
		if !r.At.IsZero() {
			head += ", loaded " + ago(r.At) + " ago"
		}
	}
	fmt.Fprintln(w, head)
	if r := st.Reload; !r.LastFailed.IsZero() && r.LastFailed.After(r.At) {
		fmt.Fprintf(w, "!! the last reload FAILED %s ago: the configuration in force is older (see the log)\n", ago(r.LastFailed))
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if s := st.Store; s != nil {
		keys := status.Count(s.Keys)
		if s.MaxKeys > 0 {
			keys += " / " + status.Count(s.MaxKeys)
		}
		health := "healthy"
		if !s.Healthy {
			health = "FAILING"
		}
		if s.Degraded != "" {
			// The store answers, but not with the state the last run left.
			health = strings.Replace(health, "healthy", "DEGRADED", 1) + " (" + s.Degraded + ")"
		}
		fmt.Fprintf(tw, "store\t%s · %s keys · %s\n", status.Safe(s.Backend), keys, status.Safe(health))
	}
	if m := st.MTA; m != nil {
		fmt.Fprintf(tw, "mta\t%s\n", status.Safe(status.MTAText(m)))
	}
	if e := st.Escalation; e != nil {
		fmt.Fprintf(tw, "escalation\t%s\n", status.Safe(status.EscalationText(e)))
	}
	var deferred uint64
	for _, v := range st.Totals.Doors {
		deferred += v["deferred"]
	}
	fmt.Fprintf(tw, "traffic\t%s decisions · %s refused since start", status.Count(int64(st.Totals.Decisions)), status.Count(int64(st.Totals.Refusals)))
	if deferred > 0 {
		fmt.Fprintf(tw, " (%s of them deferred by the throttle)", status.Count(int64(deferred)))
	}
	fmt.Fprintln(tw)
	for i, d := range st.Doors {
		label := ""
		if i == 0 {
			label = "doors"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", label, status.Safe(d.Name), status.Safe(strings.Join(d.Listen, ", ")), plural(d.Conns, "conn"))
	}
	if p := st.Pool; p != nil {
		writePool(tw, p, now)
	}
	tw.Flush()
	if st.PoolError != "" {
		fmt.Fprintf(w, "pool     %s\n", status.Safe(st.PoolError))
	}

	var classes, talkers, refusals []string
	for _, c := range st.Classes {
		reserve := ""
		if c.Reserve > 0 {
			reserve = fmt.Sprintf(" (reserve %d, %d unused)", c.Reserve, c.ReserveUnused)
		}
		classes = append(classes, fmt.Sprintf("%s\t%s\t%s%s%s", status.Safe(c.Name), capText(c.Incoming, c.IncomingCap), capText(c.Total, c.TotalCap), reserve, fullMark(c)))
	}
	for _, t := range st.Talkers {
		talkers = append(talkers, fmt.Sprintf("%s\t%s\t%s\t%s", status.Safe(t.Key), status.Safe(t.Rule), perPeriod(t.Count, t.Limit, t.Period), rateText(t.Rate)))
	}
	for _, d := range st.Refusals {
		refusals = append(refusals, fmt.Sprintf("%s ago\t%s\t%s\t%s\t%s\t%s\t%s\t%s", ago(d.At), status.Safe(d.Door), status.Safe(d.Rule), status.Safe(d.Key),
			perPeriod(d.Count, d.Limit, d.Period), status.Safe(d.Algorithm), status.Safe(verdictReason(d)), status.Safe(d.Reply)))
	}
	writeTable(w, "classes: none", "classes (sessions / cap; - = no cap)", "class\tincoming/refuse\ttotal/queue", classes, 0)
	writeTable(w, "top talkers: nobody is talking", "top talkers (busiest against their limits)", "key\trule\tcount/limit\trate", talkers, statusTalkers)
	writeTable(w, "recent refusals: none", "recent refusals (newest first)",
		"when\tdoor\trule\tkey\tcount/limit\talgorithm\tverdict\treply", refusals, statusRefusals)
	if len(st.ThrottleKeys) > 0 {
		writeTable(w, "", "throttle keys not in their normal state (after the relay's bans)", "key\tstate\tbans in a row\tlimit", throttleKeyRows(st, now), 0)
	}
}

// throttleKeyRows are the rows of the throttle keys a ban changed.
func throttleKeyRows(st *status.Status, now time.Time) []string {
	var rows []string
	for _, k := range st.ThrottleKeys {
		state := "normal"
		if k.SuspendedUntil.After(now) {
			state = "suspended until " + k.SuspendedUntil.UTC().Format(time.RFC3339) + " (" + k.SuspendedUntil.Sub(now).Round(time.Second).String() + ")"
		}
		limit := "configured"
		if k.Configured > 0 {
			limit = fmt.Sprintf("%d/%s (configured)", k.Configured, k.Period)
		}
		if k.Limit > 0 {
			limit = fmt.Sprintf("%d/%s learned, %d configured", k.Limit, k.Period, k.Configured)
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%d\t%s", status.Safe(k.Key), state, k.Bans, limit))
	}
	return rows
}

// writeTable prints one section after a blank line: empty when there are
// no rows, else the title, then the column heads and the rows (columns
// separated by tabs) aligned and indented; rows past limit (when not 0)
// are counted instead.
func writeTable(w io.Writer, empty, title, heads string, rows []string, limit int) {
	fmt.Fprintln(w)
	if len(rows) == 0 {
		fmt.Fprintln(w, empty)
		return
	}
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\n", heads)
	for i, r := range rows {
		if i == limit && limit > 0 {
			fmt.Fprintf(tw, "  … %d more (sluice status -json)%s\n", len(rows)-i, strings.Repeat("\t", strings.Count(heads, "\t")))
			break
		}
		fmt.Fprintf(tw, "  %s\n", r)
	}
	tw.Flush()
}

// writePool prints the pool as md-mx-ctrl barstatus would summarise it,
// with the slot letters, then one line per busy or killed slot, into the
// header's table (its first column is the label).
func writePool(tw io.Writer, p *status.Pool, now time.Time) {
	n := map[string]int{}
	var letters strings.Builder
	for i, s := range p.Slots {
		n[s.State]++
		if i < statusSlots {
			letters.WriteString(status.Safe(s.State))
		}
	}
	if len(p.Slots) > statusSlots {
		fmt.Fprintf(&letters, "+%d", len(p.Slots)-statusSlots)
	}
	line := fmt.Sprintf("pool\t%d/%d busy  [%s]  %d busy · %d idle · %d stopped", n[status.SlotBusy], len(p.Slots),
		letters.String(), n[status.SlotBusy], n[status.SlotIdle], n[status.SlotStopped])
	if k := n[status.SlotKilled]; k > 0 {
		line += fmt.Sprintf(" · %d killed", k)
	}
	line += fmt.Sprintf(" · queue %d/%d · %s msgs · %s activations", p.Queued, p.QueueSize, status.Count(p.Msgs), status.Count(int64(p.Activations)))
	fmt.Fprintln(tw, line)
	for i, s := range p.Slots {
		if s.State != status.SlotBusy && s.State != status.SlotKilled {
			continue
		}
		f := []string{fmt.Sprintf("slot %d", i), status.Safe(s.State)}
		if s.PID > 0 {
			f = append(f, "pid "+strconv.Itoa(s.PID))
		}
		if s.Cmd != "" {
			f = append(f, status.Safe(s.Cmd))
		}
		if !s.Since.IsZero() {
			f = append(f, status.Duration(now.Sub(s.Since)))
		}
		if s.Tag != "" {
			f = append(f, status.Safe(s.Tag))
		}
		fmt.Fprintf(tw, "\t  %s\n", strings.Join(f, "  "))
	}
}

func capText(n, limit int64) string {
	if limit <= 0 {
		return status.Count(n) + "/-"
	}
	return status.Count(n) + "/" + status.Count(limit)
}

// fullMark flags a class at one of its caps (a last cell, or nothing).
func fullMark(c status.Class) string {
	if (c.IncomingCap > 0 && c.Incoming >= c.IncomingCap) || (c.TotalCap > 0 && c.Total >= c.TotalCap) {
		return "\tFULL"
	}
	return ""
}

func perPeriod(n, limit int64, period string) string {
	s := status.Count(n)
	if limit > 0 {
		s += "/" + status.Count(limit)
	}
	if period != "" {
		s += " per " + status.Safe(period)
	}
	return s
}

// rateText is a rate per second in the unit that reads best.
func rateText(perSec float64) string {
	switch {
	case perSec <= 0:
		return "0/s"
	case perSec >= 1:
		return strconv.FormatFloat(perSec, 'f', 1, 64) + "/s"
	case perSec*60 >= 1:
		return strconv.FormatFloat(perSec*60, 'f', 1, 64) + "/min"
	}
	return strconv.FormatFloat(perSec*3600, 'f', 1, 64) + "/h"
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return status.Count(int64(n)) + " " + word + "s"
}

// verdictReason is a refusal's verdict with its reason when it is not
// the count against a limit: "DEFER (ban)".
func verdictReason(d status.Refusal) string {
	if d.Reason == "" || d.Reason == "limit" || d.Reason == "class" {
		return d.Verdict
	}
	return d.Verdict + " (" + d.Reason + ")"
}
