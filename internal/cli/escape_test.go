package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// peerSender is a MAIL FROM a remote SMTP client chose for the
// administrator's terminal: an OSC title, an SGR colour, CR, a C1 CSI
// (as a lone byte and as UTF-8), DEL, invalid UTF-8 and a bidi override.
// It has no newline: the policy protocol ends an attribute there.
const peerSender = "a\x1b]0;pwned\x07b\x1b[31mc\rd\x9be\u009bf\x7fg\xffh\u202ei@x.example"

// peerKey is the rule's key for peerSender as the daemon keeps it (and
// -json gives it): lower-cased, each invalid byte a U+FFFD.
const peerKey = "sender=a\x1b]0;pwned\x07b\x1b[31mc\rd\ufffde\u009bf\x7fg\ufffdh\u202ei@x.example"

// peerSenderShown is peerSender as every command prints it: each of
// those characters a '?'.
const peerSenderShown = "a?]0;pwned?b?[31mc?d?e?f?g?h?i@x.example"

// TestControlTextEscapesPeerText: a key a remote client chose, counted
// through the real policy door of a running daemon, is printed by every
// command that shows it (key list, key show, explain, exempt, key reset,
// status, and their errors), over the real control socket and web
// socket, with each control character, invalid byte and bidi override
// as '?', in place, on one line; a key with a newline (typed, or shared
// through Redis) does not begin a line. -json output stays valid JSON
// that says what the daemon said, with the same characters escaped.
func TestControlTextEscapesPeerText(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	writeFile(t, path, fmt.Sprintf(`state_dir = %q
[[class]]
name = "rest"
match = ["*"]
[anvil]
enabled = false
[milter]
enabled = false
[throttle]
enabled = false
[policy]
listen = ["unix:policy"]
[[policy.rule]]
name = "r"
count = "messages"
key = ["sender"]
limit = ["1/60s exact"]
action = "DEFER_IF_PERMIT 4.7.1 slow down, {key}"
[web]
listen = ["unix:web"]
`, dir))
	startServe(t, path)
	ctl := filepath.Join(dir, "control")

	// Two messages from the sender: the second is over the limit.
	c, err := net.Dial("unix", filepath.Join(dir, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	var answers []string
	for range 2 {
		fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.7\nsender=%s\n\n", peerSender)
		line, err := r.ReadString('\n')
		if err == nil {
			_, err = r.ReadString('\n')
		}
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, line)
	}
	if !strings.HasPrefix(answers[1], "action=DEFER_IF_PERMIT") {
		t.Fatalf("policy answers %q", answers)
	}

	// -json: valid JSON holding the key as the daemon has it.
	for _, args := range [][]string{{"key", "list", "-json", "-s", ctl}, {"explain", "-json", "-s", ctl, "sender=" + peerSender, "client_address=192.0.2.7", "protocol_state=END-OF-MESSAGE"}} {
		code, out, errs := run(args...)
		noControl(t, strings.Join(args, " "), out+errs)
		var v any
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
			t.Fatalf("%s: exit %d, %v: %s %s", args[0], code, err, out, errs)
		}
		if !hasString(v, peerKey) {
			t.Errorf("%s: no %q in %s", args[0], peerKey, out)
		}
	}

	// sluice status, text and JSON, from the web socket.
	// (The web server samples once a second: wait for the refusal.)
	var out string
	until(t, "sluice status showing the sender's refusal", func() (bool, string) {
		code, o, errs := run("status", "-c", path)
		out = o + errs
		return code == 0 && strings.Contains(o, "refusals (newest first)"), out
	})
	for _, want := range []string{"  sender=" + peerSenderShown + "  r  ", "  r     sender=" + peerSenderShown + "  1/1 per 60s", "DEFER_IF_PERMIT 4.7.1 slow down, sender=" + peerSenderShown + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	noControl(t, "status", out)
	code, out, errs := run("status", "-json", "-c", path)
	noControl(t, "status -json", out+errs)
	var st struct{ Talkers []struct{ Key string } }
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Talkers) == 0 ||
		st.Talkers[0].Key != peerKey {
		t.Errorf("status -json: exit %d, %v, talkers %q:\n%s%s", code, err, st.Talkers, out, errs)
	}

	const withNewline = "sender=n\x1b[2j\nforged line@x.example"
	const withNewlineShown = "sender=n?[2j?forged line@x.example"
	for _, c := range []struct {
		args []string
		want string // in the output, stdout then stderr
	}{
		{[]string{"key", "list"}, "r [sender=" + peerSenderShown + "]"},
		{[]string{"key", "show", "-rule", "r", "-key", "sender=" + peerSender}, "r [sender=" + peerSenderShown + "]"},
		{[]string{"key", "show", "sender=" + peerSender, "client_address=192.0.2.7", "protocol_state=END-OF-MESSAGE"}, "r [sender=" + peerSenderShown + "]"},
		{[]string{"key", "show", "-rule", "r", "-key", withNewline}, "r [" + withNewlineShown + "]"},
		{[]string{"explain", "sender=" + peerSender, "client_address=192.0.2.7", "protocol_state=END-OF-MESSAGE"}, "answer: DEFER_IF_PERMIT 4.7.1 slow down, sender=" + peerSenderShown + "\n"},
		{[]string{"exempt", "add", "-rule", "r", "-key", withNewline}, "rule r, key " + withNewlineShown + ": let through uncounted, until removed\n"},
		{[]string{"exempt", "add", "-rule", "r", "-key", "sender=" + peerSender, "-raise", "2"}, "key sender=" + peerSenderShown + ": limits raised by 2"},
		{[]string{"exempt", "list"}, "rule r, key " + withNewlineShown + ": let through uncounted"},
		{[]string{"exempt", "del", "-rule", "r", "-key", withNewline}, "rule r, key " + withNewlineShown + ": exemption removed\n"},
		{[]string{"key", "reset", "-rule", "r", "-key", "sender=" + peerSender}, ": sender=" + peerSenderShown + "\n"},
		{[]string{"key", "show", "-rule", "r\x1b]0;pwned\x07", "-key", "sender=" + peerSender}, "sluice key show: "},
		{[]string{"exempt", "add", "-rule", "r", "-key", "client_address=" + peerSender}, "sluice exempt add: "},
		{[]string{"throttle", "show", peerSender}, "sluice throttle show: "},
	} {
		n := 2 // the command's words, then -s, then the rest
		if c.args[0] == "explain" {
			n = 1
		}
		code, out, errs := run(append(append(append([]string{}, c.args[:n]...), "-s", ctl), c.args[n:]...)...)
		what := strings.Join(c.args[:n], " ")
		if !strings.Contains(out+errs, c.want) {
			t.Errorf("%s: exit %d, output lacks %q:\n%q\n%q", what, code, c.want, out, errs)
		}
		noControl(t, what, out+errs)
		if strings.Contains(out, "forged line") && !strings.Contains(out, withNewlineShown) {
			t.Errorf("%s: the key's newline began a line:\n%s", what, out)
		}
	}

}

// noControl fails when out has what a terminal could act on: a byte
// below 0x20 but the newline, DEL, invalid UTF-8, a C1 control or a
// bidi override.
func noControl(t *testing.T, what, out string) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		if b := out[i]; (b < 0x20 && b != '\n') || b == 0x7f {
			t.Errorf("%s: byte %#02x at %d: %q", what, b, i, out)
			return
		}
	}
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8: %q", what, out)
	}
	if strings.ContainsAny(out, "\u009b\u202e") {
		t.Errorf("%s: a C1 control or bidi override: %q", what, out)
	}
}

// hasString reports whether the decoded JSON v holds the string s.
func hasString(v any, s string) bool {
	switch v := v.(type) {
	case string:
		return v == s || strings.HasSuffix(v, ", "+s)
	case []any:
		return slices.ContainsFunc(v, func(e any) bool { return hasString(e, s) })
	case map[string]any:
		for _, e := range v {
			if hasString(e, s) {
				return true
			}
		}
	}
	return false
}

// printText escapes a control answer's text line by line (a daemon that
// left a control character in it cannot reach the terminal), keeping its
// lines; safeJSON escapes inside JSON strings what a terminal could act
// on and leaves JSON that decodes to what it did.
func TestPrintTextAndSafeJSON(t *testing.T) {
	var b strings.Builder
	printText(&b, "r [k\x1b]0;t\x07]\n    1/60s\r\x9b\xff\u202e\nno newline\x1b[31m")
	if got, want := b.String(), "r [k?]0;t?]\n    1/60s????\nno newline?[31m"; got != want {
		t.Errorf("printText: %q, want %q", got, want)
	}
	for _, in := range []string{"", "plain", peerSender, peerKey, "\U0001F600 \u2028 é \ufffd"} {
		raw, _ := json.MarshalIndent(map[string]any{"k": in, "n": []string{in}}, "", "  ")
		out := safeJSON(raw)
		noControl(t, "safeJSON", string(out))
		var v struct {
			K string
			N []string
		}
		if err := json.Unmarshal(out, &v); err != nil || v.K != strings.ToValidUTF8(in, "\ufffd") || len(v.N) != 1 || v.N[0] != v.K {
			t.Errorf("safeJSON(%q) = %s: %+v %v", in, out, v, err)
		}
	}
}

// FuzzSafeJSON: for any string, encoding/json's text through safeJSON is
// valid JSON of the same string, with nothing a terminal could act on.
func FuzzSafeJSON(f *testing.F) {
	for _, s := range []string{"", peerSender, "\U0001F600\u009b\x7f", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.MarshalIndent([]string{s}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		out := safeJSON(raw)
		var want, got []string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &got); err != nil || !slices.Equal(got, want) {
			t.Fatalf("safeJSON(%q) = %q: %q %v", raw, out, got, err)
		}
		for _, r := range string(out) {
			if r != '\n' && (r == utf8.RuneError || !unicode.IsPrint(r)) {
				t.Fatalf("safeJSON(%q) = %q: has %U", raw, out, r)
			}
		}
	})
}
