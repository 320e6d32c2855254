package muxctl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"sluice/internal/percent"
	"strconv"
	"strings"
)

// rawCommands are the request lines md-mx-ctrl sends on without decoding
// the reply, with what it sends for each.
var rawCommands = map[string]string{
	"reread\n":            "reread\n",
	"rawstatus\n":         "status\n",
	"msgs\n":              "msgs\n",
	"rawload\n":           "load\n",
	"rawload-relayok\n":   "load-relayok\n",
	"rawload-senderok\n":  "load-senderok\n",
	"rawload-recipok\n":   "load-recipok\n",
	"rawhload\n":          "hload\n",
	"rawhload-relayok\n":  "hload-relayok\n",
	"rawhload-senderok\n": "hload-senderok\n",
	"rawhload-recipok\n":  "hload-recipok\n",
}

// loadCommands and hloadCommands are the load tables md-mx-ctrl formats,
// with their column words: what is counted, and what one of them is called
// in "Avg ms/…".
var (
	loadCommands = map[string][2]string{
		"load\n":          {"Msgs", "Scan"},
		"load-relayok\n":  {"Conn", "Conn"},
		"load-senderok\n": {"MAIL", "MAIL"},
		"load-recipok\n":  {"RCPT", "RCPT"},
	}
	hloadCommands = map[string][2]string{
		"hload\n":          {"Msgs", "Scan"},
		"hload-relayok\n":  {"Conn", "Conn"},
		"hload-senderok\n": {"MAIL", "MAIL"},
		"hload-recipok\n":  {"RCPT", "RCPT"},
	}
)

// Run carries out one request line as md-mx-ctrl 3.7.1 does: the commands
// it formats itself (status, barstatus, jsonstatus, load*, hload*, load1
// N, jsonload1 N) and the raw
// ones (rawstatus, rawload*, rawhload*, rawload1 N, msgs, reread) are
// recognised by the exact line, newline included; anything else is sent
// as it is and the reply printed percent-decoded. Results go to out,
// errors to errw. It returns md-mx-ctrl's exit status: 0, or 1 when the
// exchange failed or a status or load1 reply made no sense.
func (c *Client) Run(ctx context.Context, line string, out, errw io.Writer) int {
	if req, ok := rawCommands[line]; ok {
		return c.passThrough(ctx, req, false, out, errw)
	}
	if l, ok := loadCommands[line]; ok {
		return c.formatted(ctx, line, out, errw, func(r []byte, out, _ io.Writer) int {
			return loadTable(r, l[0], l[1], out)
		})
	}
	if l, ok := hloadCommands[line]; ok {
		return c.formatted(ctx, line, out, errw, func(r []byte, out, _ io.Writer) int {
			return hloadTable(r, l[0], l[1], out)
		})
	}
	switch {
	case line == "status\n":
		return c.formatted(ctx, line, out, errw, statusTable)
	case line == "barstatus\n":
		return c.formatted(ctx, "status\n", out, errw, barStatus)
	case line == "jsonstatus\n":
		return c.formatted(ctx, "status\n", out, errw, jsonStatus(hostName()))
	case strings.HasPrefix(line, "rawload1 "):
		return c.passThrough(ctx, line[len("raw"):], false, out, errw)
	case strings.HasPrefix(line, "load1 "):
		return c.formatted(ctx, line, out, errw, func(r []byte, out, _ io.Writer) int {
			return load1Table(r, out)
		})
	case strings.HasPrefix(line, "jsonload1 "):
		return c.formatted(ctx, line[len("json"):], out, errw, jsonLoad1(hostName()))
	}
	return c.passThrough(ctx, line, true, out, errw)
}

// passThrough prints the reply (decoded if asked), adding a newline when
// a non-empty reply has none. Like the reference, the reply is a C
// string: it ends at a NUL, also one that decoding produced.
func (c *Client) passThrough(ctx context.Context, req string, decode bool, out, errw io.Writer) int {
	reply, err := c.Exchange(ctx, req, MaxLine)
	if err != nil {
		fmt.Fprintln(errw, Message(err))
		return 1
	}
	r := cstring(reply)
	if decode {
		r = cstring([]byte(percent.Decode(string(r))))
	}
	if len(r) > 0 && r[len(r)-1] != '\n' {
		r = append(r, '\n')
	}
	_, _ = out.Write(r)
	return 0
}

func (c *Client) formatted(ctx context.Context, req string, out, errw io.Writer, format func(reply []byte, out, errw io.Writer) int) int {
	reply, err := c.Exchange(ctx, req, maxFormatted)
	if err != nil {
		fmt.Fprintln(errw, Message(err))
		return 1
	}
	return format(cstring(reply), out, errw)
}

// cstring is b up to its first NUL.
func cstring(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// slotLetters checks that a status reply starts with a slot letter and
// returns the letters: everything up to the first space.
func slotLetters(r []byte, errw io.Writer) ([]byte, bool) {
	if len(r) == 0 || bytes.IndexByte([]byte("IKSB"), r[0]) < 0 {
		fmt.Fprintf(errw, "ERROR %s", r)
		return nil, false
	}
	if i := bytes.IndexByte(r, ' '); i >= 0 {
		return r[:i], true
	}
	return r, true
}

// statusTable is `md-mx-ctrl status`: one line per slot.
func statusTable(r []byte, out, errw io.Writer) int {
	letters, ok := slotLetters(r, errw)
	if !ok {
		return 1
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Max workers: %d\n", len(letters))
	for i, c := range letters {
		fmt.Fprintf(&b, "Worker %d: ", i)
		switch c {
		case 'I':
			b.WriteString("idle\n")
		case 'K':
			b.WriteString("killed\n")
		case 'S':
			b.WriteString("stopped\n")
		case 'B':
			b.WriteString("busy\n")
		default:
			b.WriteString("unknown state '")
			b.WriteByte(c)
			b.WriteString("'\n")
		}
	}
	_, _ = out.Write(b.Bytes())
	return 0
}

// Bar lengths of barstatus: more slots or queue entries than this are
// scaled down.
const (
	barLen  = 25
	qbarLen = 20
)

// barStatus is `md-mx-ctrl barstatus`: busy slots (and, with a queue,
// queued requests) as bars, then the message count.
func barStatus(r []byte, out, errw io.Writer) int {
	letters, ok := slotLetters(r, errw)
	if !ok {
		return 1
	}
	nbusy := int32(bytes.Count(letters, []byte("B")))
	ntotal := int32(len(letters))
	// The reference leaves the message count unset when the reply lacks
	// it; here it is 0.
	v, _ := scan(r[len(letters):], "dddd")
	nmsgs, maxqueue, nqueued := int32(v[0]), int32(v[2]), int32(v[3])
	var b bytes.Buffer
	fmt.Fprintf(&b, "%3d/%d ", nbusy, ntotal)
	bar(&b, 'B', nbusy, ntotal, barLen)
	if maxqueue == 0 {
		fmt.Fprintf(&b, " %d\n", nmsgs)
	} else {
		fmt.Fprintf(&b, "  %3d/%d ", nqueued, maxqueue)
		bar(&b, 'Q', nqueued, maxqueue, qbarLen)
		fmt.Fprintf(&b, " %d\n", nmsgs)
	}
	_, _ = out.Write(b.Bytes())
	return 0
}

// bar draws n of total as mark and '.': one column each up to length
// columns, else length columns scaled in single precision, as the
// reference computes them.
func bar(b *bytes.Buffer, mark byte, n, total, length int32) {
	if total <= length {
		for i := int32(0); i < total; i++ {
			b.WriteByte(dot(mark, i < n))
		}
		return
	}
	share := float32(n) / float32(total) * float32(length)
	for i := int32(0); i < length; i++ {
		b.WriteByte(dot(mark, float32(i) < share))
	}
}

func dot(mark byte, on bool) byte {
	if on {
		return mark
	}
	return '.'
}

// loadTable is `md-mx-ctrl load` and its -relayok, -senderok and -recipok
// forms: the first 12 numbers of the reply as a table.
func loadTable(r []byte, what, one string, out io.Writer) int {
	v, _ := scan(r, "ddddffffffff")
	windows := []struct {
		label string
		secs  float64
	}{{"10 Sec", 10}, {"1 Min", 60}, {"5 Min", 5 * 60}, {"10 Min", 10 * 60}}
	var b bytes.Buffer
	loadHeader(&b, what, one)
	for i, w := range windows {
		n := int32(v[i])
		fmt.Fprintf(&b, "%6s %15d %s %s %s\n", w.label, n,
			cfloat(15, 2, float64(n)/w.secs), cfloat(15, 1, v[8+i]), cfloat(15, 2, v[4+i]))
	}
	_, _ = out.Write(b.Bytes())
	return 0
}

func loadHeader(b *bytes.Buffer, what, one string) {
	fmt.Fprintf(b, "%6s %17s %15s %15s %s\n", "Load", what, what+"/Sec", "Avg ms/"+one, "  Avg Busy Workers")
}

// hloadTable is `md-mx-ctrl hload` and its forms: the hourly windows; the
// rate is over the seconds the window's samples span.
func hloadTable(r []byte, what, one string, out io.Writer) int {
	v, _ := scan(r, "ddddffffffffdddd")
	var b bytes.Buffer
	loadHeader(&b, what, one)
	for i, label := range []string{" 1h", " 4h", "12h", "24h"} {
		n, secs := int32(v[i]), int32(v[12+i])
		rate := 0.0
		if secs != 0 {
			rate = float64(n) / float64(secs)
		}
		fmt.Fprintf(&b, "%6s %15d %s %s %s\n", label, n, cfloat(15, 2, rate), cfloat(15, 1, v[8+i]), cfloat(15, 2, v[4+i]))
	}
	_, _ = out.Write(b.Bytes())
	return 0
}

// load1Table is `md-mx-ctrl load1 N`. A reply without all 26 numbers is
// printed as it came, on out, with status 1.
func load1Table(r []byte, out io.Writer) int {
	v, n := scan(r, "dffdffdffdffdddddddddddddd")
	if n != 26 {
		fmt.Fprintf(out, "Could not interpret response: %s", r)
		return 1
	}
	d := func(i int) int32 { return int32(v[i]) }
	back := d(21)
	var b bytes.Buffer
	fmt.Fprintf(&b, "Statistics for last %d seconds:\n", back)
	fmt.Fprintf(&b, "%10s %15s %15s %15s %15s\n", "Cmd", "Num", "Num/s", "AvgWorkers", "AvgMS")
	for i, name := range []string{"Scan", "Relayok", "Senderok", "Recipok"} {
		num := d(3 * i)
		fmt.Fprintf(&b, "%10s %15d %s %s %s\n", name, num,
			cfloat(15, 1, float64(num)/float64(back)), cfloat(15, 1, v[3*i+1]), cfloat(15, 1, v[3*i+2]))
	}
	fmt.Fprintf(&b, "\nCurrent Snapshot:\nWorkers: busy=%d idle=%d stopped=%d killed=%d\n", d(12), d(13), d(14), d(15))
	fmt.Fprintf(&b, "Cmds:   scan=%d relayok=%d senderok=%d recipok=%d\n", d(22), d(23), d(24), d(25))
	fmt.Fprintf(&b, "Queue:  size=%d queued=%d\n", d(18), d(19))
	_, _ = out.Write(b.Bytes())
	return 0
}

// cfloat is C's "%<width>.<prec>f": Go's digits for finite numbers (both
// round the exact binary value), C's words for infinities and NaNs.
func cfloat(width, prec int, f float64) string {
	var s string
	switch {
	case math.IsInf(f, 1):
		s = "inf"
	case math.IsInf(f, -1):
		s = "-inf"
	case math.IsNaN(f) && math.Signbit(f):
		s = "-nan"
	case math.IsNaN(f):
		s = "nan"
	default:
		s = strconv.FormatFloat(f, 'f', prec, 64)
	}
	return fmt.Sprintf("%*s", width, s)
}

// scan reads numbers from r as C's sscanf does with a format of %d ('d')
// and %lf ('f') conversions separated by spaces: each skips white space,
// and the first that finds no number ends the scan. It returns one value
// per conversion (0 for those not reached; %d values are C ints) and how
// many were converted.
func scan(r []byte, kinds string) ([]float64, int) {
	v := make([]float64, len(kinds))
	s := string(r)
	for i := 0; i < len(kinds); i++ {
		s = strings.TrimLeft(s, " \t\n\v\f\r")
		var ok bool
		if kinds[i] == 'd' {
			v[i], s, ok = scanInt(s)
		} else {
			v[i], s, ok = scanFloat(s)
		}
		if !ok {
			return v, i
		}
	}
	return v, len(kinds)
}

// scanInt reads a decimal integer as %d does: strtol's value (saturated
// to 64 bits), then cut to a 32-bit int.
func scanInt(s string) (float64, string, bool) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	start := i
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == start {
		return 0, s, false
	}
	n, _ := strconv.ParseInt(s[:i], 10, 64) // out of range: saturated, as strtol
	return float64(int32(n)), s[i:], true
}

// scanFloat reads a number as %lf does (strtod's decimal forms, inf,
// infinity and nan).
func scanFloat(s string) (float64, string, bool) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	for _, word := range []string{"infinity", "inf", "nan"} {
		if len(s)-i >= len(word) && strings.EqualFold(s[i:i+len(word)], word) {
			f := math.Inf(1)
			if word == "nan" {
				f = math.NaN()
			}
			if i > 0 && s[0] == '-' {
				f = math.Copysign(f, -1)
			}
			return f, s[i+len(word):], true
		}
	}
	digits := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return 0, s, false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && '0' <= s[j] && s[j] <= '9' {
			for j < len(s) && '0' <= s[j] && s[j] <= '9' {
				j++
			}
			i = j
		}
	}
	f, _ := strconv.ParseFloat(s[:i], 64) // out of range: ±Inf or 0, as strtod
	return f, s[i:], true
}
