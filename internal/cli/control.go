package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"sluice/internal/app"
	"sluice/internal/config"
	"sluice/internal/control"
	"sluice/internal/policy"
	"sluice/internal/postfixattr"
	"sluice/internal/status"
)

// The administrator's commands (key, explain, exempt, throttle
// show|suspend|resume): each is one request to a running daemon's
// control socket.

// ctlFlags are the flags every control command has.
type ctlFlags struct {
	fs     *flag.FlagSet
	sock   *string
	cfg    *string
	asJSON *bool
}

func newCtlFlags(name string, stderr io.Writer) ctlFlags {
	fs := newFlags(name, stderr)
	return ctlFlags{
		fs:     fs,
		sock:   fs.String("s", "", "the daemon's control `socket` (default: [control] socket of -c's file, else where sluice serve run by this user puts it)"),
		cfg:    fs.String("c", "", "the daemon's configuration `file`, to find its control socket"),
		asJSON: fs.Bool("json", false, "print the result as JSON"),
	}
}

// usage sets the command's -h text: lines, then its flags.
func (f ctlFlags) usage(lines ...string) {
	f.fs.Usage = func() {
		w := f.fs.Output()
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		fmt.Fprintln(w, "\nflags:")
		f.fs.PrintDefaults()
	}
}

// socket is the control socket to ask.
func (f ctlFlags) socket() (string, error) {
	if *f.sock != "" {
		return *f.sock, nil
	}
	if *f.cfg != "" {
		cfg, errs := config.Load(*f.cfg)
		if len(errs) > 0 {
			return "", fmt.Errorf("%s: %v", *f.cfg, errs[0])
		}
		return cfg.ControlSocket(), nil
	}
	return filepath.Join(config.DefaultRuntimeDir(), "control"), nil
}

// do sends req and prints the answer; it returns the exit status.
func (f ctlFlags) do(ctx context.Context, req control.Request, stdout, stderr io.Writer) int {
	path, err := f.socket()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", f.fs.Name(), err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := control.Do(ctx, path, req)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", f.fs.Name(), err)
		return 1
	}
	if !resp.OK {
		fmt.Fprintf(stderr, "%s: %s\n", f.fs.Name(), status.Safe(resp.Error))
		return 1
	}
	if *f.asJSON {
		printJSON(stdout, resp.Result)
		return 0
	}
	printText(stdout, resp.Text)
	return 0
}

// printText prints a control answer's text line by line through
// status.Safe. The daemon already puts every string in through Safe (so
// a key's own newline does not begin a line); this keeps a control
// character that reached the text anyway from the terminal.
func printText(w io.Writer, text string) {
	var b strings.Builder
	for line := range strings.SplitAfterSeq(text, "\n") {
		body, nl := strings.CutSuffix(line, "\n")
		b.WriteString(status.Safe(body))
		if nl {
			b.WriteByte('\n')
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// printJSON prints a control answer's result indented, through safeJSON;
// no result is null, and one that is not JSON a JSON string.
func printJSON(w io.Writer, raw json.RawMessage) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil && len(raw) > 0 {
		v = string(raw)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b = []byte(`null`)
	}
	fmt.Fprintf(w, "%s\n", safeJSON(b))
}

// safeJSON returns the JSON text b (as encoding/json writes it: ASCII
// but for the contents of strings, no control character in a string)
// with what a terminal could act on escaped inside its strings: every
// rune status.Printable rejects but the layout's newlines (DEL, C1
// controls, bidi overrides ...) as \uXXXX, and each byte of invalid
// UTF-8 as \ufffd, as encoding/json itself decodes it. The JSON means
// what it meant.
func safeJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == '\n' || status.Printable(r):
			out = append(out, b[i:i+n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default: // RuneError: invalid UTF-8, or a U+FFFD as it came
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}

// requestAttrs reads a policy request's attributes: "name=value"
// operands, or, with none (or "-"), a Postfix policy request on stdin,
// read by the policy door's codec.
func requestAttrs(operands []string, stdin io.Reader) (map[string]string, error) {
	if len(operands) == 0 || (len(operands) == 1 && operands[0] == "-") {
		var req policy.Request
		if err := policy.NewDecoder(stdin, policy.Limits{}).Decode(&req); err != nil {
			return nil, fmt.Errorf("a policy request on stdin: %w", err)
		}
		attrs := map[string]string{}
		for name := range postfixattr.Since {
			if v, ok := req.Attr(name); ok && v != "" && name != "request" {
				attrs[name] = v
			}
		}
		return attrs, nil
	}
	attrs := map[string]string{}
	for _, op := range operands {
		name, value, ok := strings.Cut(op, "=")
		if !ok || !postfixattr.Known(name) {
			return nil, fmt.Errorf("%q: not ATTRIBUTE=VALUE with a Postfix policy attribute (sender, client_address, recipient, protocol_state, sasl_username ...)", op)
		}
		attrs[name] = value
	}
	return attrs, nil
}

// stdin is where requestAttrs reads a policy request; tests replace it.
var stdin io.Reader = os.Stdin

func subcommand(name string, args []string, stderr io.Writer, subs ...string) (string, []string, bool) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintf(stderr, "usage: sluice %s %s [flags]\n", name, strings.Join(subs, "|"))
		return "", nil, false
	}
	for _, s := range subs {
		if args[0] == s {
			return s, args[1:], true
		}
	}
	fmt.Fprintf(stderr, "sluice %s: unknown subcommand %q (want %s)\n", name, args[0], strings.Join(subs, ", "))
	return "", nil, false
}

func keyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sub, rest, ok := subcommand("key", args, stderr, "show", "list", "reset")
	if !ok {
		return helpStatus(args)
	}
	f := newCtlFlags("key "+sub, stderr)
	rule := f.fs.String("rule", "", "the policy `rule`")
	key := f.fs.String("key", "", "the `key` as logs show it (sender=a@b.example, client_address=192.0.2.1); for reset, '*' matches any run of characters")
	near := f.fs.Int("near", 0, "list: only keys at or above this `percent` of a limit")
	match := f.fs.String("match", "", "list: only keys matching this `pattern` ('*' matches any run)")
	f.usage(
		"usage: sluice key show -rule RULE -key KEY | sluice key show ATTR=VALUE ... (every key the request touches)",
		"       sluice key list [-rule RULE] [-near PERCENT] [-match PATTERN]",
		"       sluice key reset -rule RULE -key KEY|PATTERN",
		"\nCounts, limits, what remains and when each resets; reset forgets a key's counts (on every daemon sharing Redis).",
	)
	if code, ok := parseFlags(f.fs, rest, stdout, stderr); !ok {
		return code
	}
	req := control.Request{Command: "key." + sub, Args: map[string]string{"rule": *rule, "key": *key}}
	switch sub {
	case "show":
		if f.fs.NArg() > 0 {
			attrs, err := requestAttrs(f.fs.Args(), stdin)
			if err != nil {
				fmt.Fprintf(stderr, "sluice key show: %v\n", err)
				return 2
			}
			req.Attrs = attrs
		}
	case "list":
		req.Args["near"], req.Args["pattern"] = fmt.Sprint(*near), *match
	}
	if (sub == "reset" || sub == "show" && req.Attrs == nil) && !flagsGiven(stderr, "key "+sub, *rule, *key) {
		return 2
	}
	return f.do(ctx, req, stdout, stderr)
}

// helpStatus is 0 when args asked for help, 2 otherwise.
func helpStatus(args []string) int {
	if len(args) > 0 {
		if a := strings.TrimLeft(args[0], "-"); a == "h" || a == "help" {
			return 0
		}
	}
	return 2
}

func explainCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newCtlFlags("explain", stderr)
	f.usage(
		"usage: sluice explain [flags] ATTR=VALUE ...   (or a Postfix policy request on stdin)",
		"\nWhat the running daemon would answer the request and why, rule by rule, counting nothing.",
		"To try a configuration file before it goes live: sluice check -c FILE ATTR=VALUE ...",
	)
	if code, ok := parseFlags(f.fs, args, stdout, stderr); !ok {
		return code
	}
	attrs, err := requestAttrs(f.fs.Args(), stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sluice explain: %v\n", err)
		return 2
	}
	return f.do(ctx, control.Request{Command: "explain", Attrs: attrs}, stdout, stderr)
}

func exemptCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sub, rest, ok := subcommand("exempt", args, stderr, "add", "del", "list")
	if !ok {
		return helpStatus(args)
	}
	f := newCtlFlags("exempt "+sub, stderr)
	rule := f.fs.String("rule", "", "the policy `rule`")
	key := f.fs.String("key", "", "the `key` as logs show it (sender=a@b.example)")
	dur := f.fs.String("for", "", "add: how `long` (30s, 1h, 7d as 168h); default until removed")
	raise := f.fs.Int64("raise", 0, "add: raise the rule's limits for the key by `N` (default: let it through the rule uncounted)")
	f.usage(
		"usage: sluice exempt add -rule RULE -key KEY [-raise N] [-for DURATION]",
		"       sluice exempt del -rule RULE -key KEY",
		"       sluice exempt list",
		"\nExemptions survive restarts and are shared through Redis.",
	)
	if code, ok := parseFlags(f.fs, rest, stdout, stderr); !ok {
		return code
	}
	req := control.Request{Command: "exempt." + sub, Args: map[string]string{"rule": *rule, "key": *key}}
	if sub == "add" {
		req.Args["for"], req.Args["raise"] = *dur, fmt.Sprint(*raise)
	}
	if sub != "list" && !flagsGiven(stderr, "exempt "+sub, *rule, *key) {
		return 2
	}
	return f.do(ctx, req, stdout, stderr)
}

// flagsGiven reports whether -rule and -key were both given; if not, it
// says which flag is missing, for the command cmd.
func flagsGiven(stderr io.Writer, cmd, rule, key string) bool {
	switch {
	case rule == "":
		fmt.Fprintf(stderr, "sluice %s: missing -rule RULE (the policy rule's name, as sluice check lists them)\n", cmd)
	case key == "":
		fmt.Fprintf(stderr, "sluice %s: missing -key KEY (as the logs show it: sender=a@b.example)\n", cmd)
	default:
		return true
	}
	return false
}

// checkExplain explains a request against cfg's rules offline (sluice
// check -c FILE ATTR=VALUE ...).
func checkExplain(cfg *config.Config, operands []string, asJSON bool, stdout, stderr io.Writer) int {
	attrs, err := requestAttrs(operands, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: %v\n", err)
		return 2
	}
	ex, text, err := app.ExplainOffline(context.Background(), cfg, attrs)
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: %v\n", err)
		return 1
	}
	if asJSON {
		b, _ := json.MarshalIndent(ex, "", "  ")
		fmt.Fprintf(stdout, "%s\n", safeJSON(b))
		return 0
	}
	fmt.Fprint(stdout, text)
	return 0
}
