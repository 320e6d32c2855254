package throttle

import (
	"bytes"
	"strings"
	"testing"
)

// Reports as qmail-remote.c prints them (its smtp() and quit()).
const (
	repDelivered   = "r\x00K127.0.0.1 accepted message.\nRemote host said: 250 ok\n\x00"
	repUserUnknown = "h127.0.0.1 does not like recipient.\nRemote host said: 550 5.1.1 <x@example.net>: user unknown\n\x00DGiving up on 127.0.0.1.\n\x00"
	repBanMail     = "DConnected to 127.0.0.1 but sender was rejected.\nRemote host said: 554 5.7.1 too many messages, you are blocked\n\x00"
	repBanRcpt     = "h127.0.0.1 does not like recipient.\nRemote host said: 550 5.7.1 rate limit exceeded\n\x00DGiving up on 127.0.0.1.\n\x00"
	repOtherMail   = "DConnected to 127.0.0.1 but sender was rejected.\nRemote host said: 553 sorry, that domain isn't allowed\n\x00"
	repNoConn      = "ZSorry, I wasn't able to establish an SMTP connection. (#4.4.1)\n\x00"
	repPermDNS     = "DSorry, I couldn't find any host named relay.example. (#5.1.2)\n\x00"
	repSlow        = "ZConnected to 127.0.0.1 but sender was rejected.\nRemote host said: 421 4.7.0 too many connections, slow down\n\x00"
)

func TestParseQmailReport(t *testing.T) {
	lines, err := ParseQmailReport([]byte(repUserUnknown))
	if err != nil || len(lines) != 2 || lines[0].Kind != 'h' || lines[1].Kind != 'D' || lines[1].Off != strings.IndexByte(repUserUnknown, 0)+1 {
		t.Fatalf("%+v %v", lines, err)
	}
	if !strings.Contains(lines[0].Text, "user unknown") {
		t.Errorf("text %q", lines[0].Text)
	}
	bad := map[string]string{
		"":                                      "empty",
		"Kok":                                   "no NUL",
		"\x00":                                  "empty report",
		"r\x00\x00":                             "empty report",
		"r\x00":                                 "no message report",
		"Xhello\x00":                            "unknown report letter",
		"Kok\x00r\x00":                          "after the message report",
		"Kok\x00Kok\x00":                        "after the message report",
		"hno\x00s\x00":                          "no message report",
		strings.Repeat("r\x00", 1001) + "K\x00": "more than 1000",
		"K" + strings.Repeat("x", MaxReport) + "\x00": "longer than",
	}
	for in, want := range bad {
		if _, err := ParseQmailReport([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseQmailReport(%.40q) = %v, want %q", in, err, want)
		}
	}
}

func TestRewriteQmailReport(t *testing.T) {
	rep := []byte(repBanRcpt)
	lines, err := ParseQmailReport(rep)
	if err != nil {
		t.Fatal(err)
	}
	got := RewriteQmailReport(rep, lines, "TT")
	want := "s" + repBanRcpt[1:strings.IndexByte(repBanRcpt, 0)+1] + "Z" + repBanRcpt[strings.IndexByte(repBanRcpt, 0)+2:]
	if string(got) != want {
		t.Errorf("rewritten %q, want %q", got, want)
	}
	if string(rep) != repBanRcpt {
		t.Error("the original was changed")
	}
	if got := RewriteQmailReport(rep, lines, ".."); !bytes.Equal(got, rep) {
		t.Errorf("kept: %q", got)
	}
	// An r or K line is never changed, whatever the flag.
	rep = []byte(repDelivered)
	lines, _ = ParseQmailReport(rep)
	if got := RewriteQmailReport(rep, lines, "TT"); !bytes.Equal(got, rep) {
		t.Errorf("delivered report changed: %q", got)
	}
}

func TestSigns(t *testing.T) {
	s := NewSigns([]string{"Too Many", "554", "5.7.1"})
	cases := map[string]string{
		"Remote host said: 452 TOO MANY recipients": "too many",
		"Remote host said: 554 go away":             "554",
		"Remote host said: 550 5.7.1 no":            "5.7.1",
		"queued as 15543":                           "",
		"5.7.10 other":                              "",
		"x5.7.1":                                    "",
		"554":                                       "554",
		"user unknown":                              "",
	}
	for in, want := range cases {
		if got := s.Match(in); got != want {
			t.Errorf("Match(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{"554": true, "4.7.0": true, "5.7.123": true, "654": false, "55": false, "5.7": false, "5.7.1234": false, "rate": false, "5.x.1": false} {
		if IsCodeSign(in) != want {
			t.Errorf("IsCodeSign(%q) = %v", in, !want)
		}
	}
}

func qlines(t *testing.T, rep string) []ResultLine {
	t.Helper()
	l, err := ParseQmailReport([]byte(rep))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := ResultFromQmail(l)
	return r
}

// The judgement and the verdict of each kind of result: only what a ban
// sign (or a suspension, for failures of the whole message) explains is
// made temporary; a user unknown never.
func TestJudgeAndVerdict(t *testing.T) {
	signs := NewSigns([]string{"too many", "rate limit"})
	cases := []struct {
		name      string
		rep       string
		j         Judgement
		verdict   string
		suspended string // the verdict while the key is suspended
	}{
		{"delivered", repDelivered, Judgement{Delivered: true}, "..", ".."},
		{"user unknown", repUserUnknown, Judgement{}, "..", ".."},
		{"ban at MAIL", repBanMail, Judgement{Failed: true, Ban: true, Sign: "too many"}, "T", "T"},
		{"ban at RCPT", repBanRcpt, Judgement{Ban: true, Sign: "rate limit"}, "TT", "TT"},
		{"other refusal at MAIL", repOtherMail, Judgement{Failed: true}, ".", "T"},
		{"no connection", repNoConn, Judgement{Failed: true}, ".", "."},
		{"qmail-remote's own error", repPermDNS, Judgement{Failed: true}, ".", "."},
		{"throttling answer", repSlow, Judgement{Failed: true, Slow: true, Sign: "too many"}, ".", "."},
	}
	for _, c := range cases {
		lines := qlines(t, c.rep)
		if j := Judge(lines, signs); j != c.j {
			t.Errorf("%s: Judge = %+v, want %+v", c.name, j, c.j)
		}
		if v := Verdict(lines, signs, false); v != c.verdict {
			t.Errorf("%s: Verdict = %q, want %q", c.name, v, c.verdict)
		}
		if v := Verdict(lines, signs, true); v != c.suspended {
			t.Errorf("%s: Verdict while suspended = %q, want %q", c.name, v, c.suspended)
		}
	}
	// A command's exit: 75 is temporary already; another failure is made
	// temporary when its text matches or the key is suspended.
	exits := []struct {
		status         int
		text           string
		j              Judgement
		verdict, inBan string
	}{
		{0, "sent", Judgement{Delivered: true}, ".", "."},
		{1, "550 rate limit", Judgement{Failed: true, Ban: true, Sign: "rate limit"}, "T", "T"},
		{1, "bad address", Judgement{Failed: true}, ".", "T"},
		{75, "too many, later", Judgement{Failed: true, Slow: true, Sign: "too many"}, ".", "."},
	}
	for _, e := range exits {
		lines := []ResultLine{ResultFromExit(e.status, []byte(e.text))}
		if j := Judge(lines, signs); j != e.j {
			t.Errorf("exit %d %q: Judge = %+v, want %+v", e.status, e.text, j, e.j)
		}
		if v := Verdict(lines, signs, false); v != e.verdict {
			t.Errorf("exit %d %q: Verdict = %q, want %q", e.status, e.text, v, e.verdict)
		}
		if v := Verdict(lines, signs, true); v != e.inBan {
			t.Errorf("exit %d %q: Verdict while suspended = %q, want %q", e.status, e.text, v, e.inBan)
		}
	}
}

func TestReportWire(t *testing.T) {
	lines := []ResultLine{{'h', "a\nb\x00c"}, {'D', strings.Repeat("y", 500)}, ResultFromExit(3, []byte("boom\n"))}
	wire := FormatReport(lines)
	parts := strings.Split(strings.TrimSuffix(wire, "\n"), "\n")
	n, err := ParseReportHeader(parts[0])
	if err != nil || n != 3 || len(parts) != 4 {
		t.Fatalf("%q: %d %v", wire, n, err)
	}
	for i, p := range parts[1:] {
		l, err := ParseResultLine(p)
		if err != nil || l.Kind != lines[i].Kind {
			t.Errorf("line %d %q: %+v %v", i, p, l, err)
		}
	}
	if l, _ := ParseResultLine(parts[1]); l.Text != "a?b?c" {
		t.Errorf("non-printable bytes: %q", l.Text)
	}
	if l, _ := ParseResultLine(parts[2]); len(l.Text) != maxResultText {
		t.Errorf("long text kept %d bytes", len(l.Text))
	}
	for _, in := range []string{"REPORT", "REPORT 0", "REPORT 65", "REPORT x", "REPORTS 1", "REPORT -1"} {
		if _, err := ParseReportHeader(in); err == nil {
			t.Errorf("ParseReportHeader(%q) accepted", in)
		}
	}
	for _, in := range []string{"", "Xtext", "x", "xabc", "x300 text", "x-1 t", "htab\there", "K" + strings.Repeat("z", 401)} {
		if _, err := ParseResultLine(in); err == nil {
			t.Errorf("ParseResultLine(%q) accepted", in)
		}
	}
	for in, n := range map[string]int{"VERDICT": 1, "VERDICT T": 2, "VERDICT X": 1, "VERDICT .T": 1, "VERDICTS .": 1} {
		if _, err := ParseVerdict(in, n); err == nil {
			t.Errorf("ParseVerdict(%q, %d) accepted", in, n)
		}
	}
	if v, err := ParseVerdict("VERDICT .T", 2); err != nil || v != ".T" {
		t.Errorf("%q %v", v, err)
	}
}

// FuzzParseQmailReport: no input panics; what parses rewrites to a report
// that parses to the same lines, with only the letters changed.
func FuzzParseQmailReport(f *testing.F) {
	for _, s := range []string{repDelivered, repUserUnknown, repBanMail, repBanRcpt, repNoConn, "", "\x00", "K"} {
		f.Add([]byte(s), "TT")
	}
	signs := NewSigns([]string{"too many", "554", "5.7.1"})
	f.Fuzz(func(t *testing.T, b []byte, verdict string) {
		lines, err := ParseQmailReport(b)
		if err != nil {
			return
		}
		out := RewriteQmailReport(b, lines, verdict)
		again, err := ParseQmailReport(out)
		if err != nil || len(again) != len(lines) {
			t.Fatalf("rewritten report does not parse: %q %v", out, err)
		}
		for i := range lines {
			if again[i].Text != lines[i].Text || again[i].Off != lines[i].Off {
				t.Fatalf("line %d changed beyond its letter", i)
			}
		}
		if r, ok := ResultFromQmail(lines); ok {
			v := Verdict(r, signs, true)
			if len(v) != len(r) {
				t.Fatalf("verdict %q for %d lines", v, len(r))
			}
			Judge(r, signs)
		}
	})
}

// FuzzParseResultLine: no input panics; what parses survives the wire.
func FuzzParseResultLine(f *testing.F) {
	for _, s := range []string{"hx", "x0 ok", "x75 ", "K", "REPORT 3", "VERDICT .T"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ParseReportHeader(s)
		ParseVerdict(s, 2)
		l, err := ParseResultLine(s)
		if err != nil {
			return
		}
		wire := strings.Split(FormatReport([]ResultLine{l}), "\n")[1]
		if back, err := ParseResultLine(wire); err != nil || back != l {
			t.Fatalf("%q -> %q -> %+v %v", s, wire, back, err)
		}
	})
}

// BenchmarkJudgeQmailReport: what the daemon does with each send's
// result and the wrapper with its report: parse, judge, verdict, rewrite.
func BenchmarkJudgeQmailReport(b *testing.B) {
	signs := NewSigns([]string{"too many", "rate limit", "blocked", "554"})
	rep := []byte(repBanMail)
	b.ReportAllocs()
	for b.Loop() {
		lines, err := ParseQmailReport(rep)
		if err != nil {
			b.Fatal(err)
		}
		r, _ := ResultFromQmail(lines)
		Judge(r, signs)
		RewriteQmailReport(rep, lines, Verdict(r, signs, false))
	}
}
