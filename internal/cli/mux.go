package cli

// `sluice mux`: the mimedefang-multiplexor command line (docs/protocols/mimedefang-multiplexor.md: "Startup", "Pid and lock files",
// "Modes and backlog", "Command-line options"). The flags, defaults, clamps, startup order and startup error
// texts are the reference's; the program also answers to the name
// mimedefang-multiplexor (see Invoked).
//
// Differences from the reference, on purpose:
//   - Daemon mode (no -D) cannot fork in Go: the process re-executes itself
//     detached (new session, stdio on /dev/null) with the pid file and a
//     report pipe inherited, and exits 0 once the daemon reports it is
//     serving, or 1 with "Error from child: <msg>", as the reference's
//     parent does. The daemon is a session leader (the reference forks
//     twice so that it is not); it never opens a terminal.
//   - Errors the reference only sends to syslog (pid file, privilege drop)
//     are printed too. The log goes to the local syslog socket (/dev/log)
//     with the -Y ident and -S facility, as openlog(3) with LOG_PID does;
//     when that socket does not exist, to stderr, after one notice.
//   - -R and -M are applied by an exec shim (this program, re-executed as
//     /proc/self/exe) that calls setrlimit and then execs the worker,
//     since Go cannot run code between fork and exec.
//   - -d writes sluice's own event-loop trace (one timestamped line per
//     event the pool's owner loop handles) to
//     /var/log/mdefang-event-debug.log; the reference's lines (from its
//     event library, and only in builds with DEBUG_EVENT) differ.
//   - -k (upstream HEAD's autoscaling) is accepted, as HEAD accepts it;
//     the 3.3 reference rejects it. See package mux for the details.
//   - A flag whose feature is not built would be accepted and announced on
//     stderr, one line per flag, never silently ignored (none is left).
//   - The -N socket map (docs/protocols/mimedefang-multiplexor.md, "Socket map") answers as the reference does; like the
//     reference it is created after the pool starts, a failure to create
//     it is only logged, and its socket file is left behind at exit.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sluice/internal/mux"
	"sluice/internal/pool"
	"sluice/internal/privdrop"
	"sluice/internal/socketmap"
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

// muxChildEnv marks the detached daemon started by daemonize: fd 3 is the
// report pipe and, with -p, fd 4 the pid file opened by the parent.
const muxChildEnv = "SLUICE_MUX_DAEMON"

// Getopt option letters: with an argument, and without. -k (autoscaling)
// is the upstream HEAD's; 3.3 rejects it.
const (
	muxArgOpts  = "tpoUmxyrViIbcwWzsafFRMLSNOqQXPY"
	muxFlagOpts = "hvTuZdlDAGEk"
)

// muxOptions is the parsed and clamped command line.
type muxOptions struct {
	help, version bool
	foreground    bool   // -D
	user          string // -U
	spool         string // -z
	socket        string // -s
	restricted    string // -a
	program       string // -f
	rules         string // -F
	pidFile       string // -p
	lockFile      string // -o (or <pidfile>.lock)
	group         bool   // -G
	verbose       bool   // -l

	minWorkers, maxWorkers, maxRequests int // -m -x -r
	lifetime                            int // -V seconds, <= 0 unlimited
	idle, busy, cmd, slew, spacing      int // -i -b -c -w -W seconds
	queue, queueTimeout                 int // -q, -Q seconds
	domainLimit                         int // -y
	backlog                             int // -I

	facility, label       string // -S -Y
	stats                 string // -t
	statsSyslog, flush    bool   // -T -u
	statusPipe            bool   // -Z
	debugEvents, schedLog bool   // -d -A
	embedded, autoscale   bool   // -E -k
	rss, mem              int    // -R -M kB
	logInterval           int    // -L
	tick, ticks           int    // -X -P
	notifySock            string // -O
	mapSock               string // -N (socket map, docs/protocols/mimedefang-multiplexor.md, "Socket map")
	notices               []string
	backlogSet, lockGiven bool
	eventLog              string // -d's file (tests move it)
}

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
	return &muxOptions{
		spool:        "/var/spool/MIMEDefang",
		program:      "/usr/bin/mimedefang.pl",
		maxWorkers:   2,
		maxRequests:  500,
		idle:         300,
		busy:         120,
		cmd:          10,
		slew:         3,
		queueTimeout: 30,
		ticks:        1,
		facility:     "mail",
		label:        ReferenceName,
		eventLog:     muxEventLog,
	}
}

// parseMuxArgs parses args as the reference's getopt does (clustered
// flags, attached or separate arguments, GNU permutation, "--") and
// applies its clamps. A returned error other than errUsage is a fatal
// message to print after "prog: ".
func parseMuxArgs(prog string, args []string, stderr io.Writer) (*muxOptions, error) {
	o := defaultMuxOptions()
	seen := map[byte]bool{}
	var extra []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			extra = append(extra, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			extra = append(extra, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			var val string
			switch {
			case strings.IndexByte(muxArgOpts, c) >= 0:
				if j+1 < len(a) {
					val = a[j+1:]
				} else if i+1 < len(args) {
					i++
					val = args[i]
				} else {
					fmt.Fprintf(stderr, "%s: option requires an argument -- '%c'\n\n", prog, c)
					return nil, errUsage
				}
				j = len(a)
			case strings.IndexByte(muxFlagOpts, c) >= 0:
			default:
				fmt.Fprintf(stderr, "%s: invalid option -- '%c'\n\n", prog, c)
				return nil, errUsage
			}
			if err := o.set(c, val); err != nil {
				return nil, err
			}
			// The reference acts on -h and -v inside its getopt loop:
			// what follows them is never looked at.
			if o.help {
				return o, errUsage
			}
			if o.version {
				return o, nil
			}
			if c == 'E' && !seen[c] { // the reference's own words, unprefixed
				o.notices = append(o.notices, "mimedefang-multiplexor compiled without support for embedded perl.  Ignoring -E flag.")
			}
			seen[c] = true
		}
	}
	if len(extra) > 0 {
		o.notices = append(o.notices, fmt.Sprintf("%s: extra arguments ignored: %s", prog, strings.Join(extra, " ")))
	}
	o.clamp()
	return o, nil
}

// set applies one option; numbers are read as sscanf("%d") does.
func (o *muxOptions) set(c byte, val string) error {
	num := func(p *int) error {
		n, ok := scanDecimal(val)
		if !ok {
			return errUsage
		}
		*p = n
		return nil
	}
	switch c {
	case 'h':
		o.help = true
	case 'v':
		o.version = true
	case 'D':
		o.foreground = true
	case 'G':
		o.group = true
	case 'l':
		o.verbose = true
	case 'T':
		o.statsSyslog = true
	case 'u':
		o.flush = true
	case 'Z':
		o.statusPipe = true
	case 'd':
		o.debugEvents = true
	case 'A':
		o.schedLog = true
	case 'E':
		o.embedded = true
	case 'k':
		o.autoscale = true
	case 'U':
		o.user = val
	case 'z':
		o.spool = val
	case 's':
		o.socket = val
	case 'a':
		o.restricted = val
	case 'f':
		if !strings.HasPrefix(val, "/") {
			return fatalText("-f: You must supply an absolute path for filter program")
		}
		o.program = val
	case 'F':
		o.rules = val
	case 'p':
		o.pidFile = val
	case 'o':
		o.lockFile, o.lockGiven = val, true
	case 't':
		o.stats = val
	case 'Y':
		o.label = val
	case 'N':
		o.mapSock = val
	case 'O':
		o.notifySock = val
	case 'S':
		if _, ok := syslog.FacilityCode(val); !ok {
			return fatalText("Unknown syslog facility " + val)
		}
		o.facility = val
	case 'q':
		if err := num(&o.queue); err != nil {
			return err
		}
		if o.queue > 128 {
			return fatalText(fmt.Sprintf("Request queue size %d too big (128 max)", o.queue))
		}
	case 'I':
		o.backlogSet = true
		return num(&o.backlog)
	default:
		p := map[byte]*int{
			'm': &o.minWorkers, 'x': &o.maxWorkers, 'r': &o.maxRequests, 'V': &o.lifetime,
			'i': &o.idle, 'b': &o.busy, 'c': &o.cmd, 'w': &o.slew, 'W': &o.spacing,
			'Q': &o.queueTimeout, 'y': &o.domainLimit, 'R': &o.rss, 'M': &o.mem,
			'L': &o.logInterval, 'X': &o.tick, 'P': &o.ticks,
		}[c]
		return num(p)
	}
	return nil
}

// clamp applies the reference's adjustments (docs/protocols/mimedefang-multiplexor.md, "Startup" step 8 and "Command-line options").
func (o *muxOptions) clamp() {
	o.maxWorkers = max(o.maxWorkers, 1)
	o.minWorkers = min(max(o.minWorkers, 1), o.maxWorkers)
	if o.domainLimit < 0 || o.domainLimit >= o.maxWorkers {
		o.domainLimit = 0
	}
	o.maxRequests = max(o.maxRequests, 1)
	o.lifetime = max(o.lifetime, 0)
	o.idle = max(o.idle, 10)
	o.busy = max(o.busy, 10)
	o.cmd = max(o.cmd, 10)
	o.slew = max(o.slew, 1)
	o.spacing = max(o.spacing, 0)
	o.queue = max(o.queue, 0)
	o.queueTimeout = min(max(o.queueTimeout, 1), 600)
	if !o.backlogSet {
		o.backlog = o.maxWorkers / 4
	}
	o.backlog = min(max(o.backlog, 5), 200)
	if o.logInterval < 0 {
		o.logInterval = 0
	} else if o.logInterval > 0 && o.logInterval < 5 {
		o.logInterval = 5
	}
	o.tick = max(o.tick, 0)
	o.ticks = min(max(o.ticks, 1), 30)
	if o.socket == "" {
		o.socket = o.spool + "/mimedefang-multiplexor.sock"
	}
	if !o.lockGiven && o.pidFile != "" {
		o.lockFile = o.pidFile + ".lock"
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
  -k                -- Autoscale workers (upstream HEAD)
-E (embedded Perl) is accepted and ignored, with the reference's notice.
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
	return runMux(ctx, o, prog, stderr)
}

// muxDaemon is one run's state.
type muxDaemon struct {
	o      *muxOptions
	prog   string
	stderr io.Writer
	report *os.File // the daemonize pipe (detached child only)
	pid    *os.File
	lock   *os.File
}

// fail reports a startup error: to the waiting parent when detached, else
// on stderr. It returns the exit status.
func (d *muxDaemon) fail(msg string) int {
	if d.report != nil {
		_, _ = d.report.WriteString("E" + msg)
		d.report.Close()
		d.report = nil
	} else {
		fmt.Fprintln(d.stderr, msg)
	}
	d.cleanup()
	return 1
}

func (d *muxDaemon) cleanup() {
	if d.pid != nil {
		d.pid.Close()
	}
	if d.lock != nil {
		d.lock.Close()
	}
}

// runMux is the reference's startup (docs/protocols/mimedefang-multiplexor.md, "Startup", from step 1), serving and
// shutdown.
func runMux(ctx context.Context, o *muxOptions, prog string, stderr io.Writer) int {
	d := &muxDaemon{o: o, prog: prog, stderr: stderr}
	fileMask := 0o077
	if o.group {
		fileMask = 0o027
	}
	syscall.Umask(0o077)
	if os.Getuid() != os.Geteuid() || os.Getgid() != os.Getegid() {
		fmt.Fprintf(stderr, "%s: refusing to run setuid or setgid\n", prog)
		return 1
	}
	child := os.Getenv(muxChildEnv) != ""
	if child {
		os.Unsetenv(muxChildEnv) // the workers inherit the environment
		syscall.CloseOnExec(3)
		d.report = os.NewFile(3, "report pipe")
		if o.pidFile != "" {
			syscall.CloseOnExec(4)
			d.pid = os.NewFile(4, o.pidFile)
		}
	} else if o.pidFile != "" {
		// Opened before the privilege drop, as the reference does.
		f, err := os.OpenFile(o.pidFile, os.O_WRONLY|os.O_CREATE, 0o666)
		if err != nil {
			fmt.Fprintf(stderr, "%s: cannot open pid file: %v\n", prog, err)
			return 1
		}
		_ = f.Chmod(0o644)
		d.pid = f
	}
	exe, exeErr := os.Executable()
	if o.user != "" {
		if msg := dropPrivileges(o.user); msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", prog, msg)
			d.cleanup()
			return 1
		}
	}
	if os.Getuid() == 0 || os.Geteuid() == 0 {
		fmt.Fprintln(stderr, "ERROR: You must not run mimedefang-multiplexor as root.\nUse the -U option to set a non-root user.")
		d.cleanup()
		return 1
	}
	if !child {
		if err := os.Chdir(o.spool); err != nil {
			fmt.Fprintf(stderr, "%s: Unable to chdir(%s): %s\n", prog, o.spool, errnoText(err))
			d.cleanup()
			return 1
		}
		if !o.foreground {
			if exeErr != nil {
				fmt.Fprintf(stderr, "%s: cannot find my own executable to daemonize (use -D): %v\n", prog, exeErr)
				d.cleanup()
				return 1
			}
			return d.daemonize(exe)
		}
	}
	syscall.Umask(fileMask)
	if o.lockFile != "" {
		f, err := os.OpenFile(o.lockFile, os.O_RDWR|os.O_CREATE, 0o666)
		if err == nil {
			d.lock = f
			err = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK})
		}
		if err != nil {
			return d.fail("Cannot lock lockfile: Is another copy running?")
		}
	}
	if d.pid != nil {
		_ = d.pid.Truncate(0)
		_, _ = fmt.Fprintf(d.pid, "%d\n", os.Getpid())
		d.pid.Close()
		d.pid = nil
	}
	mainMask := 0o077
	if o.group {
		mainMask = 0o007
	}
	mainAddr, err := parseMuxSocket(o.socket, false)
	if err != nil {
		d.removeFiles()
		return d.fail(err.Error())
	}
	mainLn, err := listenMux(mainAddr, o.backlog, mainMask, fileMask)
	if err != nil {
		d.removeFiles()
		return d.fail("Unable to create listening socket.")
	}
	listeners := []muxListener{{mainLn, true, mainAddr.path}}
	if o.restricted != "" {
		a, err := parseMuxSocket(o.restricted, true)
		var ln net.Listener
		if err == nil {
			ln, err = listenMux(a, o.backlog, 0, fileMask)
		}
		if err != nil {
			mainLn.Close()
			_ = os.Remove(mainAddr.path)
			d.removeFiles()
			return d.fail("Unable to create unprivileged listening socket")
		}
		unlink := ""
		if strings.HasPrefix(a.path, "/") {
			unlink = a.path
		}
		listeners = append(listeners, muxListener{ln, false, unlink})
	}
	return d.serve(ctx, listeners)
}

type muxListener struct {
	ln         net.Listener
	privileged bool
	unlink     string // removed at exit
}

// serve runs the pool and the sockets until SIGTERM or ctx ends. SIGINT
// rereads the filter rules (a new worker generation) and SIGHUP reopens
// the stats file, as the reference does.
func (d *muxDaemon) serve(ctx context.Context, listeners []muxListener) int {
	o := d.o
	// One P, unless GOMAXPROCS says otherwise: the multiplexor's work is a
	// chain of hand-offs between goroutines (connection, pool owner,
	// worker pipes), and with more Ps each one wakes another thread that
	// spins looking for work: mux CPU per request was 35-40% higher for
	// no more throughput (bench/mux.sh on 2 cores). The reference is
	// single-threaded too.
	if os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	facility, _ := syslog.FacilityCode(o.facility)
	sysl := syslog.Open(syslog.Options{Path: os.Getenv(muxSyslogEnv), Tag: o.label, Facility: facility, Fallback: d.stderr})
	defer sysl.Close()
	level := slog.LevelInfo // what the reference always logs; the pool gates the rest on -l
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(sysl.Handler(level))
	args := []string{"-server"}
	if o.statusPipe {
		args = []string{"-serveru"}
	}
	if o.rules != "" {
		args = append([]string{"-f", o.rules}, args...)
	}
	var stats *mux.StatsLog
	if o.stats != "" || o.statsSyslog {
		so := mux.StatsOptions{Path: o.stats, Flush: o.flush, Logger: log}
		if o.statsSyslog {
			so.Syslog = func(msg string) { log.Info(msg) }
		}
		stats = mux.OpenStats(so)
		defer stats.Close()
	}
	var eventLog *slog.Logger
	if o.debugEvents {
		// fopen(..., "w") as the reference does; a failure is only logged.
		f, err := os.OpenFile(o.eventLog, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
		if err != nil {
			log.Error(fmt.Sprintf("Could not open event debug log %s: %s", o.eventLog, errnoText(err)))
		} else {
			defer f.Close()
			eventLog = slog.New(mux.NewEventLogHandler(f))
		}
	}
	notifier := mux.NewNotifier(log, time.Duration(o.cmd)*time.Second)
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	cfg := pool.Config{
		Program: o.program, Args: args,
		MinWorkers: o.minWorkers, MaxWorkers: o.maxWorkers, MaxRequests: o.maxRequests,
		MaxLifetime: sec(o.lifetime), IdleTime: sec(o.idle), BusyTimeout: sec(o.busy),
		CmdTimeout: sec(o.cmd), SlewTime: sec(o.slew), ActivationSpacing: sec(o.spacing),
		QueueSize: o.queue, QueueTimeout: sec(o.queueTimeout), DomainLimit: o.domainLimit,
		LogStderr: o.verbose, Events: mux.PoolLog{Logger: log, Verbose: o.verbose}.Event,
		StatusPipe: o.statusPipe, TickInterval: sec(o.tick), TickBands: o.ticks,
		StatusLogInterval: sec(o.logInterval), LogScheduling: o.schedLog,
		RLimitRSS: uint64(max(o.rss, 0)) * 1024, RLimitAS: uint64(max(o.mem, 0)) * 1024,
		Autoscale: o.autoscale, EventLog: eventLog,
	}
	if o.notifySock != "" {
		cfg.Notify = notifier.Notify
	}
	// sluice's own addition: a status page and /metrics, when asked for
	// in the environment (the command line stays the reference's).
	var mweb *muxWeb
	if spec := os.Getenv(muxWebEnv); spec != "" {
		var err error
		if mweb, err = newMuxWeb(spec); err != nil {
			log.Error(err.Error())
		}
	}
	switch {
	case stats != nil && mweb != nil:
		cfg.Stats = func(ev pool.StatsEvent) { stats.Event(ev); mweb.statsEvent(ev) }
	case stats != nil:
		cfg.Stats = stats.Event
	case mweb != nil:
		cfg.Stats = mweb.statsEvent
	}
	p, err := pool.New(cfg)
	if err != nil {
		for _, l := range listeners {
			l.ln.Close()
		}
		d.removeAll(listeners)
		if mweb != nil {
			mweb.close()
		}
		return d.fail(err.Error())
	}
	if mweb != nil {
		mweb.serve(p)
		defer mweb.close()
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	signal.Ignore(syscall.SIGPIPE)

	poolCtx, stopPool := context.WithCancel(context.Background())
	defer stopPool()
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(poolCtx) }()
	srv := mux.New(mux.Options{Pool: p, Timeout: sec(o.cmd), Logger: log})
	serveDone := make(chan error, len(listeners))
	for _, l := range listeners {
		go func() { serveDone <- srv.Serve(l.ln, l.privileged) }()
	}
	// docs/protocols/mimedefang-multiplexor.md, "Startup" step 19: the -O and -N sockets come after the pool starts, and
	// failing to create them is only logged.
	notifyDone := make(chan error, 1)
	notifying := false
	if o.notifySock != "" {
		if ln, err := d.listenAux(o.notifySock, 5); err != nil {
			log.Error(fmt.Sprintf("Unable to create notification socket %s: %v", o.notifySock, err))
		} else {
			notifying = true
			go func() { notifyDone <- notifier.Serve(ln) }()
		}
	}
	var mapSrv *socketmap.Server
	mapDone := make(chan error, 1)
	if o.mapSock != "" {
		if ln, err := d.listenAux(o.mapSock, o.backlog); err != nil {
			log.Error(fmt.Sprintf("Unable to create socket map listening socket %s: %v", o.mapSock, err))
		} else {
			mapSrv = socketmap.NewServer(socketmap.PoolHandler{Pool: p}, socketmap.Options{WriteTimeout: sec(o.cmd), Logger: log})
			go func() { mapDone <- mapSrv.Serve(ln) }()
		}
	}
	if d.report != nil {
		_, _ = d.report.WriteString("X")
		d.report.Close()
		d.report = nil
	}
	for stop := false; !stop; {
		select {
		case <-ctx.Done():
			stop = true
		case s := <-sigs:
			switch s {
			case syscall.SIGINT:
				p.Reread()
			case syscall.SIGHUP:
				if stats != nil {
					stats.Reopen()
				}
			default:
				stop = true
			}
		}
	}
	// docs/protocols/mimedefang-multiplexor.md, "Signals": files and sockets first, then clients see EOF, then the
	// workers: stdin closed, SIGTERM after 10 s, SIGKILL after 10 more.
	if o.verbose {
		log.Info("Received SIGTERM: Stopping workers and terminating")
	}
	d.removeAll(listeners)
	srv.Close()
	for range listeners {
		<-serveDone
	}
	if mapSrv != nil {
		mapSrv.Close()
		<-mapDone
	}
	notifier.Close()
	if notifying {
		<-notifyDone
	}
	stopPool()
	<-runDone
	d.cleanup()
	return 0
}

// listenAux creates the -N or -O socket (docs/protocols/mimedefang-multiplexor.md, "Modes and backlog": the main socket's umask;
// any address form -a takes).
func (d *muxDaemon) listenAux(sock string, backlog int) (net.Listener, error) {
	a, err := parseMuxSocket(sock, true)
	if err != nil {
		return nil, err
	}
	sockMask, fileMask := 0o077, 0o077
	if d.o.group {
		sockMask, fileMask = 0o007, 0o027
	}
	return listenMux(a, backlog, sockMask, fileMask)
}

// removeFiles unlinks the pid file and the lock file.
func (d *muxDaemon) removeFiles() {
	if d.o.pidFile != "" {
		_ = os.Remove(d.o.pidFile)
	}
	if d.o.lockFile != "" {
		_ = os.Remove(d.o.lockFile)
	}
}

func (d *muxDaemon) removeAll(listeners []muxListener) {
	d.removeFiles()
	for _, l := range listeners {
		if l.unlink != "" {
			_ = os.Remove(l.unlink)
		}
	}
}

// daemonize is docs/protocols/mimedefang-multiplexor.md, "Startup" step 9, in Go's terms: start this program again,
// detached, with the pid file and a report pipe, and exit 0 when it says
// "X" (serving), or print "Error from child: <msg>" and exit 1.
func (d *muxDaemon) daemonize(exe string) int {
	defer d.cleanup()
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(d.stderr, "%s: %v\n", d.prog, err)
		return 1
	}
	defer r.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		fmt.Fprintf(d.stderr, "%s: %v\n", d.prog, err)
		return 1
	}
	defer devnull.Close()
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        os.Args,
		Env:         append(os.Environ(), muxChildEnv+"=1"),
		Stdin:       devnull,
		Stdout:      devnull,
		Stderr:      devnull,
		ExtraFiles:  []*os.File{w},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if d.pid != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, d.pid)
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		fmt.Fprintf(d.stderr, "%s: starting the daemon: %v\n", d.prog, err)
		return 1
	}
	msg, _ := io.ReadAll(r)
	if string(msg) == "X" {
		_ = cmd.Process.Release()
		return 0
	}
	_ = cmd.Wait()
	text := strings.TrimPrefix(string(msg), "E")
	if text == "" {
		text = "exited before it was ready"
	}
	fmt.Fprintf(d.stderr, "Error from child: %s\n", text)
	return 1
}

// dropPrivileges is initgroups, setgid, setuid to name (skipped when the
// process already runs as that user and group). It returns an error text
// in the reference's words.
func dropPrivileges(name string) string {
	a, err := privdrop.Lookup(name)
	if err != nil {
		return fmt.Sprintf("Unknown user '%s'", name)
	}
	var se *privdrop.StepError
	if err := a.Drop(); errors.As(err, &se) {
		return fmt.Sprintf("%s: %s", se.Step, errnoText(se.Err))
	} else if err != nil {
		return err.Error()
	}
	return ""
}

// errnoText is strerror's text: the errno message with a capital.
func errnoText(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		s := en.Error()
		if s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return err.Error()
}

// muxAddr is a parsed socket argument (docs/protocols/mimedefang-multiplexor.md, "Framing").
type muxAddr struct {
	network string // "unix", "tcp4" or "tcp6"
	path    string
	ip      net.IP
	port    int
}

// parseMuxSocket reads a socket argument: a path, unix:PATH or
// local:PATH, and (with inet) inet:PORT (127.0.0.1), inet_any:PORT,
// inet6:PORT (::1) and inet6_any:PORT. Anything else is a path.
func parseMuxSocket(s string, inet bool) (muxAddr, error) {
	if !inet && strings.HasPrefix(s, "inet") {
		return muxAddr{}, fatalText("Argument to -s option must be a UNIX-domain socket, not a TCP socket.")
	}
	for _, p := range []string{"unix:", "local:"} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return muxAddr{network: "unix", path: rest}, nil
		}
	}
	for _, f := range []struct {
		prefix, network string
		ip              net.IP
	}{
		{"inet:", "tcp4", net.IPv4(127, 0, 0, 1)},
		{"inet_any:", "tcp4", net.IPv4zero},
		{"inet6:", "tcp6", net.IPv6loopback},
		{"inet6_any:", "tcp6", net.IPv6unspecified},
	} {
		if rest, ok := strings.CutPrefix(s, f.prefix); ok {
			port, err := strconv.Atoi(rest)
			if err != nil || port < 1 || port > 65535 {
				return muxAddr{}, fmt.Errorf("bad port in %q", s)
			}
			return muxAddr{network: f.network, ip: f.ip, port: port}, nil
		}
	}
	return muxAddr{network: "unix", path: s}, nil
}

// listenMux creates a listening socket with the given backlog; a unix
// socket replaces any file at its path and is created under sockMask
// (the process umask is fileMask again afterwards).
func listenMux(a muxAddr, backlog, sockMask, fileMask int) (net.Listener, error) {
	var domain int
	var sa syscall.Sockaddr
	switch a.network {
	case "unix":
		domain = syscall.AF_UNIX
		sa = &syscall.SockaddrUnix{Name: a.path}
		if err := os.Remove(a.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	case "tcp4":
		domain = syscall.AF_INET
		s4 := &syscall.SockaddrInet4{Port: a.port}
		copy(s4.Addr[:], a.ip.To4())
		sa = s4
	default:
		domain = syscall.AF_INET6
		s6 := &syscall.SockaddrInet6{Port: a.port}
		copy(s6.Addr[:], a.ip.To16())
		sa = s6
	}
	fd, err := syscall.Socket(domain, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	if domain != syscall.AF_UNIX {
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			return nil, err
		}
	}
	syscall.Umask(sockMask)
	err = syscall.Bind(fd, sa)
	syscall.Umask(fileMask)
	if err != nil {
		return nil, err
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		return nil, err
	}
	return net.FileListener(f)
}
