package cli

// `sluice mux`: the mimedefang-multiplexor command line (docs/protocols/mimedefang-multiplexor.md: "Startup",
// "Command-line options"). The flags, defaults, clamps and parse error texts are the reference's; the program
// also answers to the name mimedefang-multiplexor (see Invoked). Package muxd runs the daemon the options
// describe (its doc lists the daemon's differences from the reference).
//
// Differences from the reference's command line, on purpose:
//   - -R and -M are applied by an exec shim (this program, re-executed as
//     /proc/self/exe) that calls setrlimit and then execs the worker,
//     since Go cannot run code between fork and exec.
//   - -d writes sluice's own event-loop trace to
//     /var/log/mdefang-event-debug.log (see package muxd).
//   - -k (3.7.1's autoscaling) is accepted, as 3.7.1 accepts it; the 3.3
//     reference rejects it. See package mux (VersionChoices).
//   - A flag whose feature is not built would be accepted and announced on
//     stderr, one line per flag, never silently ignored (none is left).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sluice/internal/muxd"
	"sluice/internal/syslog"
)

// ReferenceName is mimedefang-multiplexor's program name: invoked under
// it, sluice behaves as `sluice mux`.
const ReferenceName = "mimedefang-multiplexor"

// referenceVersion is the version the reference reports; `version` on the
// sockets and -v keep it, since clients may compare it.
const referenceVersion = "3.3"

// Invoked returns the subcommand that a program name (argv[0], a path or
// a basename) stands for, or "" for sluice's own name.
func Invoked(argv0 string) string {
	switch filepath.Base(argv0) {
	case ReferenceName:
		return "mux"
	case "md-mx-ctrl":
		return "ctl"
	}
	return ""
}

// Getopt option letters: with an argument, and without. -k (autoscaling)
// is 3.7.1's; 3.3 rejects it.
const (
	muxArgOpts  = "tpoUmxyrViIbcwWzsafFRMLSNOqQXPY"
	muxFlagOpts = "hvTuZdlDAGEk"
)

// muxOptions is the parsed and clamped command line: the daemon's options
// and what only the command line acts on.
type muxOptions struct {
	muxd.Options
	help, version         bool
	notices               []string
	backlogSet, lockGiven bool
}

// muxWebEnv names the environment variable that gives `sluice mux` a
// status page and /metrics of its own: "inet:127.0.0.1:8026" or
// "unix:/run/sluice-mux.web". It is an environment variable, not a flag,
// so that the reference's command line stays exactly as it is (Debian's
// init script passes flags from /etc/default/mimedefang; an exported
// variable there reaches the multiplexor).
const muxWebEnv = "SLUICE_MUX_WEB"

// muxSyslogEnv, when set, is the syslog socket to use instead of
// /dev/log (for tests, and for systems whose socket is elsewhere).
const muxSyslogEnv = "SLUICE_MUX_SYSLOG_SOCKET"

// muxEventLog is where -d writes the event-loop trace.
const muxEventLog = "/var/log/mdefang-event-debug.log"

// errUsage means: print the usage text and exit 1.
var errUsage = errors.New("usage")

// fatalText is a startup error worded as the reference words it.
type fatalText string

func (f fatalText) Error() string { return string(f) }

func defaultMuxOptions() *muxOptions {
	return &muxOptions{Options: muxd.Options{
		Spool:        "/var/spool/MIMEDefang",
		Program:      "/usr/bin/mimedefang.pl",
		MaxWorkers:   2,
		MaxRequests:  500,
		Idle:         300 * time.Second,
		Busy:         120 * time.Second,
		Cmd:          10 * time.Second,
		Slew:         3 * time.Second,
		QueueTimeout: 30 * time.Second,
		Ticks:        1,
		Facility:     "mail",
		Label:        ReferenceName,
		EventLog:     muxEventLog,
	}}
}

// parseMuxArgs parses args as the reference's getopt does (clustered
// flags, attached or separate arguments, GNU permutation, "--") and
// applies its clamps. A returned error other than errUsage is a fatal
// message to print after "prog: ".
func parseMuxArgs(prog string, args []string, stderr io.Writer) (*muxOptions, error) {
	o := defaultMuxOptions()
	extra, err := getopt(args, muxArgOpts, muxFlagOpts, false, func(c byte, val string) (bool, error) {
		if err := o.set(c, val); err != nil {
			return false, err
		}
		// The reference acts on -h and -v inside its getopt loop: what
		// follows them is never looked at.
		if o.help || o.version {
			return false, nil
		}
		return true, nil
	})
	var oe optError
	switch {
	case errors.As(err, &oe):
		fmt.Fprintf(stderr, "%s: %v\n\n", prog, oe)
		return nil, errUsage
	case err != nil:
		return nil, err
	case o.help:
		return o, errUsage
	case o.version:
		return o, nil
	}
	if len(extra) > 0 {
		o.notices = append(o.notices, fmt.Sprintf("%s: extra arguments ignored: %s", prog, strings.Join(extra, " ")))
	}
	o.clamp()
	return o, nil
}

// set applies one option; numbers are read as sscanf("%d") does.
func (o *muxOptions) set(c byte, val string) error {
	if p := o.flag(c); p != nil {
		*p = true
		return nil
	}
	if p := o.text(c); p != nil {
		*p = val
		return nil
	}
	switch c {
	case 'f':
		if !strings.HasPrefix(val, "/") {
			return fatalText("-f: You must supply an absolute path for filter program")
		}
		o.Program = val
	case 'o':
		o.LockFile, o.lockGiven = val, true
	case 'S':
		if _, ok := syslog.FacilityCode(val); !ok {
			return fatalText("Unknown syslog facility " + val)
		}
		o.Facility = val
	default:
		n, ok := scanDecimal(val)
		if !ok {
			return errUsage
		}
		return o.number(c, n)
	}
	return nil
}

// flag is the field of a flag without an argument, or nil.
func (o *muxOptions) flag(c byte) *bool {
	return map[byte]*bool{
		'h': &o.help, 'v': &o.version, 'D': &o.Foreground, 'G': &o.Group, 'l': &o.Verbose,
		'T': &o.StatsSyslog, 'u': &o.Flush, 'Z': &o.StatusPipe, 'd': &o.DebugEvents,
		'A': &o.SchedLog, 'E': &o.Embed, 'k': &o.Autoscale,
	}[c]
}

// text is the field of an option whose argument is kept as given, or nil.
func (o *muxOptions) text(c byte) *string {
	return map[byte]*string{
		'U': &o.User, 'z': &o.Spool, 's': &o.Socket, 'a': &o.Restricted, 'F': &o.Rules,
		'p': &o.PidFile, 't': &o.Stats, 'Y': &o.Label, 'N': &o.MapSocket, 'O': &o.NotifySocket,
	}[c]
}

// number applies an option whose argument is a number: a count, seconds
// or kB.
func (o *muxOptions) number(c byte, n int) error {
	switch c {
	case 'q':
		if n > 128 {
			return fatalText(fmt.Sprintf("Request queue size %d too big (128 max)", n))
		}
		o.Queue = n
	case 'I':
		o.Backlog, o.backlogSet = n, true
	case 'R':
		o.RLimitRSS = uint64(max(n, 0)) * 1024
	case 'M':
		o.RLimitAS = uint64(max(n, 0)) * 1024
	}
	if p := map[byte]*int{'m': &o.MinWorkers, 'x': &o.MaxWorkers, 'r': &o.MaxRequests, 'y': &o.DomainLimit, 'P': &o.Ticks}[c]; p != nil {
		*p = n
	}
	if p := map[byte]*time.Duration{
		'V': &o.Lifetime, 'i': &o.Idle, 'b': &o.Busy, 'c': &o.Cmd, 'w': &o.Slew, 'W': &o.Spacing,
		'Q': &o.QueueTimeout, 'L': &o.LogInterval, 'X': &o.Tick,
	}[c]; p != nil {
		*p = time.Duration(n) * time.Second
	}
	return nil
}

// clamp applies the reference's adjustments (docs/protocols/mimedefang-multiplexor.md, "Startup" step 8 and "Command-line options").
func (o *muxOptions) clamp() {
	const sec = time.Second
	o.MaxWorkers = max(o.MaxWorkers, 1)
	o.MinWorkers = min(max(o.MinWorkers, 1), o.MaxWorkers)
	if o.DomainLimit < 0 || o.DomainLimit >= o.MaxWorkers {
		o.DomainLimit = 0
	}
	o.MaxRequests = max(o.MaxRequests, 1)
	o.Lifetime = max(o.Lifetime, 0)
	o.Idle = max(o.Idle, 10*sec)
	o.Busy = max(o.Busy, 10*sec)
	o.Cmd = max(o.Cmd, 10*sec)
	o.Slew = max(o.Slew, sec)
	o.Spacing = max(o.Spacing, 0)
	o.Queue = max(o.Queue, 0)
	o.QueueTimeout = min(max(o.QueueTimeout, sec), 600*sec)
	if !o.backlogSet {
		o.Backlog = o.MaxWorkers / 4
	}
	o.Backlog = min(max(o.Backlog, 5), 200)
	if o.LogInterval < 0 {
		o.LogInterval = 0
	} else if o.LogInterval > 0 && o.LogInterval < 5*sec {
		o.LogInterval = 5 * sec
	}
	o.Tick = max(o.Tick, 0)
	o.Ticks = min(max(o.Ticks, 1), 30)
	if o.Socket == "" {
		o.Socket = o.Spool + "/mimedefang-multiplexor.sock"
	}
	if !o.lockGiven && o.PidFile != "" {
		o.LockFile = o.PidFile + ".lock"
	}
}

// scanDecimal reads an int as sscanf("%d") does: leading white space, an
// optional sign, at least one digit; what follows is ignored. Values are
// capped at +-2^31.
func scanDecimal(s string) (int, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	n, i := 0, 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = min(n*10+int(s[i]-'0'), 1<<31)
	}
	if i == 0 {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

const muxUsageOptions = `Options:
  -h                -- Print usage info and exit
  -v                -- Print version and exit
  -t filename       -- Log statistics to filename
  -p filename       -- Write process-ID in filename
  -o file           -- Use specified file as a lock file
  -T                -- Log statistics to syslog
  -u                -- Flush stats file after each write
  -Z                -- Accept and process status updates from busy workers
  -U username       -- Run as username, not root
  -m minWorkers      -- Minimum number of workers
  -x maxWorkers      -- Maximum number of workers
  -y recipokPerDom  -- Maximum concurrent recipoks per domain
  -r maxRequests    -- Maximum number of requests per worker
  -V maxLifetime    -- Maximum lifetime of a worker in seconds
  -i idleTime       -- Idle time (seconds) for killing excess workers
  -b busyTime       -- Busy time (seconds) for killing hung workers
  -c cmdTime        -- Request/reply transmission timeout (seconds)
  -w waitTime       -- How long to wait between worker activations (seconds)
  -W waitTime       -- Absolute minimum to wait between worker activations
  -z dir            -- Spool directory
  -s sock           -- UNIX-domain socket for communication
  -a u_sock         -- Socket for unprivileged communication
  -f /dir/filter    -- Specify full path of filter program
  -d                -- Debug events in /var/log/mdefang-event-debug.log
  -l                -- Log events with syslog
  -R size           -- Limit RSS to size kB (if supported on your OS)
  -M size           -- Limit memory address space to size kB
  -L interval       -- Log worker status every interval seconds
  -S facility       -- Set syslog(3) facility
  -N sock           -- Listen for Sendmail map requests on sock
  -O sock           -- Listen for notification requests on sock
  -q size           -- Size of request queue (default 0)
  -Q timeout        -- Timeout for queued requests
  -I backlog        -- 'backlog' argument for listen on multiplexor socket
  -D                -- Do not become a daemon (stay in foreground)
  -X interval       -- Run a 'tick' request every interval seconds
  -P n              -- Run 'n' parallel tick requests
  -Y label          -- Set syslog label to 'label'
  -G                -- Make sockets group-writable
  -E                -- Use embedded Perl interpreter
`

// muxUsage is the reference's usage text (on stderr), then, as `sluice
// mux`, what sluice adds. name is the program named on the Usage line:
// the reference's own name (never argv[0]), under which the text is the
// reference's byte for byte, or "sluice mux".
func muxUsage(w io.Writer, name string) {
	fmt.Fprintf(w, "mimedefang-multiplexor version %s\nUsage: %s [options]\n%s", referenceVersion, name, muxUsageOptions)
	if name == ReferenceName {
		return
	}
	fmt.Fprint(w, `  -F rules_path     -- Pass -f rules_path to the filter program
  -A                -- Log scheduling decisions
  -k                -- Enable adaptive autoscaling of the worker pool (3.7.1)
-E forks the workers from one perl that has compiled the -f program once.
`)
}

// muxProg is the name errors are prefixed with and the name on the usage
// line. Invoked under the reference's name, errors are prefixed with
// argv[0] as given (a path stays a path), as the reference's are, and the
// usage line names the reference; otherwise both are "sluice mux".
func muxProg() (prog, usage string) {
	if Invoked(os.Args[0]) == "mux" {
		return os.Args[0], ReferenceName
	}
	return "sluice mux", "sluice mux"
}

// muxVersionLine is what -v prints on stdout: under the reference's name
// exactly the reference's line (scripts parse it); as `sluice mux`, the
// same line with sluice's own version after it.
func muxVersionLine(asReference bool) string {
	if asReference {
		return fmt.Sprintf("mimedefang-multiplexor version %s\n", referenceVersion)
	}
	return fmt.Sprintf("mimedefang-multiplexor version %s (sluice %s)\n", referenceVersion, versionString())
}

func muxCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	prog, usage := muxProg()
	o, err := parseMuxArgs(prog, args, stderr)
	if errors.Is(err, errUsage) {
		muxUsage(stderr, usage)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", prog, err)
		return 1
	}
	if o.version {
		fmt.Fprint(stdout, muxVersionLine(Invoked(os.Args[0]) == "mux"))
		return 0
	}
	for _, n := range o.notices {
		fmt.Fprintln(stderr, n)
	}
	o.Prog, o.Version = prog, versionString()
	o.SyslogSocket, o.Web = os.Getenv(muxSyslogEnv), os.Getenv(muxWebEnv)
	return muxd.Run(ctx, o.Options, stderr)
}
