package bantest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// RelayEnv names the environment variable that gives the qmail-remote
// stand-in its relay (host:port), as control/smtproutes gives qmail-remote.
const RelayEnv = "BANTEST_RELAY"

// QmailRemote is a stand-in for qmail-remote (qmail is not packaged for
// Debian): argv is host, sender, recipients; it sends the message on
// stdin to relay over SMTP and prints qmail-remote's report to out, with
// qmail-remote.c's texts (its smtp() and quit()), and returns the exit
// status (0, as qmail-remote exits after every report).
func QmailRemote(relay string, argv []string, in io.Reader, out io.Writer) int {
	w := bufio.NewWriter(out)
	defer w.Flush()
	report := func(s string) { w.WriteString(s); w.WriteByte(0) }
	if len(argv) < 3 {
		report("DI (qmail-remote) was invoked improperly. (#5.3.5)\n")
		return 0
	}
	c, err := net.DialTimeout("tcp", relay, 10*time.Second)
	if err != nil {
		report("ZSorry, I wasn't able to establish an SMTP connection. (#4.4.1)\n")
		return 0
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	q := &qsession{c: c, br: bufio.NewReader(c), report: report, host: "127.0.0.1"}
	return q.smtp(argv, in)
}

// qsession is one SMTP session of the stand-in, as qmail-remote.c's smtp().
type qsession struct {
	c      net.Conn
	br     *bufio.Reader
	report func(string)
	host   string
	text   string // the last reply's lines, as smtpcode() keeps them
}

// code reads a reply (multi-line too) and returns its code (-1: the
// connection died).
func (q *qsession) code() int {
	var b strings.Builder
	n := 0
	for {
		l, err := q.br.ReadString('\n')
		if err != nil {
			return -1
		}
		b.WriteString(strings.TrimSuffix(l, "\r\n") + "\n")
		if len(l) < 4 || l[3] != '-' {
			fmt.Sscanf(l, "%d", &n)
			break
		}
	}
	q.text = b.String()
	return n
}

func (q *qsession) send(s string) { fmt.Fprintf(q.c, "%s\r\n", s) }

func (q *qsession) quit(prepend, appendix string) int {
	q.send("QUIT")
	r := prepend + q.host + appendix + ".\n"
	if q.text != "" {
		r += "Remote host said: " + q.text
	}
	q.report(r)
	return 0
}

func (q *qsession) dropped() int {
	q.report("ZConnected to " + q.host + " but connection died. (#4.4.2)\n")
	return 0
}

func (q *qsession) smtp(argv []string, in io.Reader) int {
	code, send, quit, dropped, report, host := q.code, q.send, q.quit, q.dropped, q.report, q.host
	n := code()
	switch {
	case n < 0:
		return dropped()
	case n != 220:
		return quit("ZConnected to ", " but greeting failed")
	}
	send("HELO sender.test")
	if n = code(); n < 0 {
		return dropped()
	} else if n != 250 {
		return quit("ZConnected to ", " but my name was rejected")
	}
	send("MAIL FROM:<" + argv[1] + ">")
	n = code()
	switch {
	case n < 0:
		return dropped()
	case n >= 500:
		return quit("DConnected to ", " but sender was rejected")
	case n >= 400:
		return quit("ZConnected to ", " but sender was rejected")
	}
	bother := false
	for _, rc := range argv[2:] {
		send("RCPT TO:<" + rc + ">")
		n = code()
		switch {
		case n < 0:
			return dropped()
		case n >= 500:
			report("h" + host + " does not like recipient.\nRemote host said: " + q.text)
		case n >= 400:
			report("s" + host + " does not like recipient.\nRemote host said: " + q.text)
		default:
			report("r")
			bother = true
		}
	}
	q.text = ""
	if !bother {
		return quit("DGiving up on ", "")
	}
	send("DATA")
	n = code()
	switch {
	case n < 0:
		return dropped()
	case n >= 500:
		return quit("D", " failed on DATA command")
	case n >= 400:
		return quit("Z", " failed on DATA command")
	}
	body, _ := io.ReadAll(io.LimitReader(in, 1<<20))
	for _, l := range strings.SplitAfter(string(body), "\n") {
		if l == "" {
			continue
		}
		l = strings.TrimSuffix(l, "\n")
		if strings.HasPrefix(l, ".") {
			l = "." + l
		}
		send(l)
	}
	send(".")
	n = code()
	switch {
	case n < 0:
		return dropped()
	case n >= 500:
		return quit("D", " failed after I sent the message")
	case n >= 400:
		return quit("Z", " failed after I sent the message")
	}
	return quit("K", " accepted message")
}
