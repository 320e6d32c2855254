package throttle

import (
	"strings"
)

// Signs are a policy's ban signs: texts in a relay's answers that mean
// it has cut the sender off ("too many", "rate limit", "blocked"), or
// reply codes ("554", "5.7.1"). A text matches anywhere, ignoring case; a
// code (three digits, or an enhanced status d.d.d) only as a whole word,
// so "554" matches "Remote host said: 554 5.7.1 go away" but not a
// queue id holding 15543.
type Signs []sign

type sign struct {
	text string // lower case
	code bool
}

// NewSigns compiles the configured signs (checked by the configuration:
// non-empty, printable).
func NewSigns(texts []string) Signs {
	out := make(Signs, 0, len(texts))
	for _, t := range texts {
		out = append(out, sign{text: strings.ToLower(t), code: IsCodeSign(t)})
	}
	return out
}

// IsCodeSign says whether a sign is a reply code (matched as a word).
func IsCodeSign(s string) bool {
	if len(s) == 3 && s[0] >= '2' && s[0] <= '5' && isDigits(s[1:]) {
		return true
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 || len(parts[0]) != 1 || parts[0][0] < '2' || parts[0][0] > '5' {
		return false
	}
	for _, p := range parts[1:] {
		if p == "" || len(p) > 3 || !isDigits(p) {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Match returns the first sign text matches ("" if none).
func (ss Signs) Match(text string) string {
	if len(ss) == 0 {
		return ""
	}
	low := strings.ToLower(text)
	for _, s := range ss {
		if !s.code {
			if strings.Contains(low, s.text) {
				return s.text
			}
			continue
		}
		for i := 0; ; {
			j := strings.Index(low[i:], s.text)
			if j < 0 {
				break
			}
			j += i
			end := j + len(s.text)
			if (j == 0 || !codeByte(low[j-1])) && (end == len(low) || !codeByte(low[end])) {
				return s.text
			}
			i = j + 1
		}
	}
	return ""
}

func codeByte(c byte) bool { return c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' }

// Judgement is what one send's result says about the relay.
type Judgement struct {
	// Delivered: the relay took the message (for some recipient).
	Delivered bool
	// Failed: the relay took nothing, and not for a recipient's own reason
	// (a rejected sender, greeting, DATA, a refused connection; a
	// command's non-zero exit). Consecutive failures count toward a ban.
	Failed bool
	// Ban: a permanent failure matched a ban sign.
	Ban bool
	// Slow: a temporary failure matched a ban sign (a throttling answer).
	Slow bool
	// Sign is the sign that matched.
	Sign string
}

// Judge reads a send's result.
func Judge(lines []ResultLine, signs Signs) Judgement {
	var j Judgement
	if len(lines) == 0 {
		return j
	}
	note := func(perm bool, text string) {
		if s := signs.Match(text); s != "" {
			if j.Sign == "" {
				j.Sign = s
			}
			if perm {
				j.Ban = true
			} else {
				j.Slow = true
			}
		}
	}
	last := lines[len(lines)-1]
	if last.Kind == 'x' {
		status, text, _ := last.ExitStatus()
		j.Delivered = status == 0
		j.Failed = status != 0
		if status != 0 {
			note(status != exTempFail, text)
		}
		return j
	}
	rcpts, accepted := 0, false
	for _, l := range lines[:len(lines)-1] {
		rcpts++
		switch l.Kind {
		case 'r':
			accepted = true
		case 'h', 's':
			note(l.Kind == 'h', l.Text)
		}
	}
	switch last.Kind {
	case 'K':
		j.Delivered = accepted || rcpts == 0
	case 'Z', 'D':
		note(last.Kind == 'D', last.Text)
		j.Failed = rcpts == 0 || accepted
	}
	return j
}

// exTempFail is sysexits' EX_TEMPFAIL, a command's "try again later".
const exTempFail = 75

// Verdict flags the permanent failures of lines that the ban explains, to
// be made temporary: a recipient's or the message's report that matches a
// ban sign; the message's "Giving up" when every rejected recipient
// matched; and, while the key is suspended, a failure of the whole message
// that came from the relay (a send that hit the ban already on). A
// recipient's own rejection (user unknown) that matches no sign is never
// flagged; nor is qmail-remote's own permanent error (its texts end in
// "(#5.x.x)").
func Verdict(lines []ResultLine, signs Signs, suspended bool) string {
	flags := []byte(strings.Repeat(string(rune(VerdictKeep)), len(lines)))
	if len(lines) == 0 {
		return ""
	}
	last := len(lines) - 1
	if lines[last].Kind == 'x' {
		status, text, _ := lines[last].ExitStatus()
		if status != 0 && status != exTempFail && (suspended || signs.Match(text) != "") {
			flags[last] = VerdictTemporary
		}
		return string(flags)
	}
	rejected, rewritten, accepted := 0, 0, false
	for i, l := range lines[:last] {
		switch l.Kind {
		case 'r':
			accepted = true
		case 'h':
			rejected++
			if signs.Match(l.Text) != "" {
				flags[i] = VerdictTemporary
				rewritten++
			}
		}
	}
	if m := lines[last]; m.Kind == 'D' {
		own := strings.Contains(m.Text, "(#5.")
		switch {
		case signs.Match(m.Text) != "":
			flags[last] = VerdictTemporary
		case !accepted && rejected > 0 && rewritten == rejected:
			flags[last] = VerdictTemporary
		case suspended && !own && (last == 0 || accepted):
			flags[last] = VerdictTemporary
		}
	}
	return string(flags)
}
