// Package cli is sluice's command line: the subcommand table, flags and
// help text.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/internal/app"
	"sluice/internal/config"
	"sluice/internal/handover"
	"sluice/internal/sdnotify"
)

// Version is set at build time with -ldflags "-X sluice/internal/cli.Version=...".
var Version = ""

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the daemon (embedded defaults without -c)", serve},
		{"check", "validate a configuration file and print it as understood", check},
		{"status", "show a running daemon's state (from its [web] listener)", statusCmd},
		{"throttle", "wait for a send slot, then run a command (qmail-remote wrapper); show, suspend, resume, reset keys", throttleCmd},
		{"key", "show, list or reset a running daemon's counts (control socket)", keyCmd},
		{"explain", "what a running daemon would answer a policy request, and why", explainCmd},
		{"exempt", "let a key through a rule, or raise its limit, for a while", exemptCmd},
		{"mux", "mimedefang-multiplexor: run a pool of filter workers (also as that name)", muxCmd},
		{"ctl", "md-mx-ctrl: query and command a mimedefang multiplexor", ctlCmd},
		{"escalate-helper", "as root: drop in the kernel the addresses the daemon escalates ([mta.escalate])", escalateHelper},
		{"version", "print the version", version},
	}
}

// Main runs the command line args (without the program name) and returns
// the exit status. "sluice help", -h and --help print the usage to
// stdout and exit 0; "sluice help COMMAND" prints the command's; no
// command at all is a usage error (stderr, 2).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" {
			return commandHelp(ctx, args[1], stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// commandHelp prints a command's usage to stdout, as "COMMAND -h" does,
// and exits 0. For mux and ctl, whose -h keeps the reference programs'
// behaviour (usage on stderr; mimedefang-multiplexor exits 1), it is the
// one way to get their usage on stdout with status 0.
func commandHelp(ctx context.Context, name string, stdout, stderr io.Writer) int {
	for _, c := range commands() {
		if c.name == name {
			c.run(ctx, []string{"-h"}, stdout, stdout)
			return 0
		}
	}
	fmt.Fprintf(stderr, "sluice help: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "sluice governs mail traffic: class limits, client counts and rates (Postfix anvil),")
	fmt.Fprintln(w, "rate limits and outbound throttling, in one daemon.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'sluice <command> -h' or 'sluice help <command>' for a command's flags.")
}

func version(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", stderr)
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	fmt.Fprintf(stdout, "sluice %s\n", versionString())
	return 0
}

func versionString() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	return buildVersion(bi)
}

// buildVersion is the module's version, then what Go embedded of the
// source (-buildvcs): the revision, its time, and "modified" when the
// tree had changes not committed; then the Go version. Two builds can
// be told apart in a bug report.
func buildVersion(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	if r := set["vcs.revision"]; len(r) >= 12 {
		v += " " + r[:12]
		if t := set["vcs.time"]; t != "" {
			v += " " + t
		}
		if set["vcs.modified"] == "true" {
			v += " modified"
		}
	}
	return v + " (" + bi.GoVersion + ")"
}

// newFlags makes the flag set of a sluice command; its usage names the
// command and says what it does. Parse it with parseFlags.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: sluice %s [flags]\n", name)
		for _, c := range commands() {
			if c.name == name {
				fmt.Fprintf(w, "\n%s%s.\n", strings.ToUpper(c.summary[:1]), c.summary[1:])
			}
		}
		if hasFlags(fs) {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses a command's flags. It reports ok when the command
// should go on; otherwise it returns the exit status: 0 after -h or
// --help, whose usage goes to stdout (so that "sluice serve --help |
// less" works), 2 after a flag error, reported with the usage on stderr.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		fs.SetOutput(stderr)
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	default:
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		fs.Usage()
		return 2, false
	}
}

// loadConfig reads path, or returns the defaults when path is empty.
func loadConfig(path string) (*config.Config, []error) {
	if path == "" {
		c := config.Default()
		return c, c.Validate()
	}
	return config.Load(path)
}

func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", stderr)
	path := fs.String("c", "", "configuration `file` to check (required)")
	postconf := fs.String("postconf", "", "Postfix's configuration `directory` (or its main.cf) to compare [anvil.smtpd] with, through postconf (default: anvil.postfix_config_dir)")
	quiet := fs.Bool("q", false, "print only errors (nothing when the configuration is good)")
	var units []string
	fs.Func("socket-unit", "a systemd socket `unit` file that passes sockets to serve (repeat the flag for each): each ListenStream= must be a listen address of a door the configuration turns on; a file that does not exist is skipped, as systemd skips a unit that is not installed",
		func(f string) error { units = append(units, f); return nil })
	service := fs.String("service-unit", "", "the systemd service `unit` file that runs serve: every unix socket no socket unit passes must be one its User= can make under its ProtectSystem= and ReadWritePaths= (without it: as the user running check)")
	asJSON := fs.Bool("json", false, "with a request: print the explanation as JSON")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: sluice check -c FILE [-q] [-socket-unit UNIT]... [-service-unit UNIT] [-postconf DIR]")
		fmt.Fprintln(w, "       sluice check -c FILE [-json] ATTR=VALUE ...   (or - : a Postfix policy request on stdin)")
		fmt.Fprintln(w, "\nValidate a configuration file and print it as understood; with a request, what its rules")
		fmt.Fprintln(w, "would answer it, rule by rule, with nothing counted yet (sluice explain asks a running daemon).")
		fmt.Fprintln(w, "\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if *path == "" {
		fmt.Fprintln(stderr, "sluice check: -c FILE is required")
		return 2
	}
	cfg, errs := config.Load(*path)
	if len(errs) == 0 {
		errs = append(cfg.CheckAccess(), cfg.CheckFileOwners()...)
	}
	var skipped []string
	if len(errs) == 0 {
		skipped, errs = app.CheckSocketUnits(cfg, units)
	}
	if len(errs) == 0 {
		errs = app.CheckSocketDirs(cfg, units, *service)
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
		}
		fmt.Fprintf(stderr, "%s: %d error(s)\n", *path, len(errs))
		return 1
	}
	// serve logs the capacity's warnings itself, at each start and reload.
	for _, w := range append(configWarnings(ctx, *path, cfg, *postconf), capacityWarnings(ctx, cfg)...) {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if fs.NArg() > 0 {
		return checkExplain(cfg, fs.Args(), *asJSON, stdout, stderr)
	}
	if *quiet {
		return 0
	}
	printConfig(stdout, cfg)
	for _, u := range skipped {
		fmt.Fprintf(stdout, "socket unit %s: not installed, skipped\n", u)
	}
	fmt.Fprintf(stdout, "%s: OK\n", *path)
	return 0
}

// printConfig shows the configuration as sluice understood it.
func printConfig(w io.Writer, cfg *config.Config) {
	if len(cfg.Included) > 0 {
		fmt.Fprintf(w, "merged after %s (include_dir, in this order): %s\n", cfg.File, strings.Join(cfg.Included, ", "))
	}
	fmt.Fprintf(w, "state directory: %s\nsocket directory: %s\n", cfg.StateDir, cfg.SocketDir())
	if cfg.User != "" {
		fmt.Fprintf(w, "runs as user: %s (started as root, it switches once its sockets are bound)\n", cfg.User)
	}
	if r := cfg.Store.Redis; cfg.Store.Kind == "redis" {
		where := strings.Join(r.Addrs, ", ")
		switch {
		case r.MasterSet != "":
			where = fmt.Sprintf("the master of set %q named by the Sentinels %s", r.MasterSet, where)
		case r.Cluster:
			where = "the Redis Cluster of " + where
		}
		fmt.Fprintf(w, "limiter: Redis store at %s (prefix %q), deadline %s, fail %s, leases expire %s after their host dies; peaks logged every %s\n",
			where, r.KeyPrefix, r.Deadline.D(), r.FailMode, r.LeaseTTL.D(), cfg.Limiter.StatusInterval.D())
	} else {
		fmt.Fprintf(w, "limiter: in-memory store, at most %d keys, when full: %s; peaks logged every %s\n",
			cfg.Limiter.MaxKeys, cfg.Limiter.WhenFull, cfg.Limiter.StatusInterval.D())
		printSnapshot(w, cfg)
	}
	if table, err := app.ClassTableText(cfg); err != nil {
		fmt.Fprintf(w, "\nclasses: %v\n", err)
	} else {
		fmt.Fprintf(w, "\nclasses (first match wins; refuse caps incoming sessions, queue all sessions; - = no cap):\n%s", table)
		printClassOrigins(w, cfg)
	}
	doors, _ := cfg.CapDoors()
	fmt.Fprintf(w, "refuse caps enforced by: %s\n", doors)
	printCapacity(w, cfg)
	printEscalation(w, cfg)
	printPolicy(w, cfg)
	printThrottle(w, cfg)
	printMilter(w, cfg)
	printWeb(w, cfg)
	printControl(w, cfg)
	printAnvil(w, cfg)
}

// printAnvil shows the anvil service and smtpd's limits per class.
func printAnvil(w io.Writer, cfg *config.Config) {
	a := cfg.Anvil
	if !a.Enabled {
		fmt.Fprintln(w, "\nanvil service: off")
		return
	}
	fmt.Fprintf(w, "\nanvil service: %s (mode %s", strings.Join(a.Listen, ", "), a.Socket.Mode)
	if a.Socket.Owner != "" {
		fmt.Fprintf(w, ", owner %s", a.Socket.Owner)
	}
	fmt.Fprintf(w, "), time unit %s\n", a.RateTimeUnit.D())
	names := []string{"connection count", "connection rate", "message rate", "recipient rate", "new TLS rate", "AUTH rate"}
	smtpd := a.SMTPD.Values()
	specs, _ := cfg.ClassTable() // its errors are printed with the classes
	fmt.Fprintln(w, "smtpd limits (main.cf) and per-class limits sluice makes smtpd enforce:")
	for i, n := range names {
		line := fmt.Sprintf("  %-17s smtpd %s", n, limitText(smtpd[i]))
		var per []string
		for _, s := range specs {
			if v := s.Anvil.Values()[i]; v != nil {
				per = append(per, fmt.Sprintf("%s=%s", s.Name, limitText(v)))
			}
		}
		sort.Strings(per)
		if len(per) > 0 {
			line += "; " + strings.Join(per, " ")
		}
		fmt.Fprintln(w, line)
	}
}

func printPolicy(w io.Writer, cfg *config.Config) {
	p := cfg.Policy
	if !p.Enabled {
		fmt.Fprintln(w, "\npolicy service: off")
		return
	}
	rules, err := app.PolicyRulesText(cfg)
	if err != nil {
		rules = err.Error() + "\n"
	}
	fmt.Fprintf(w, "\npolicy service: %s; when no rule refuses: %s\nrules, in order (the first that refuses answers):\n%s",
		strings.Join(p.Listen, ", "), p.DefaultAction, rules)
}

func printThrottle(w io.Writer, cfg *config.Config) {
	t := cfg.Throttle
	if !t.Enabled {
		fmt.Fprintln(w, "\nthrottle service: off")
		return
	}
	rules, err := app.ThrottleRulesText(cfg)
	if err != nil {
		rules = err.Error() + "\n"
	}
	fmt.Fprintf(w, "\nthrottle service: %s\npolicies, first match wins:\n%s", strings.Join(t.Listen, ", "), rules)
}

func limitText(p *int64) string {
	if p == nil || *p == 0 {
		return "off"
	}
	return fmt.Sprint(*p)
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("serve", stderr)
	path := fs.String("c", "", "configuration `file` (default: the embedded defaults)")
	stateDir := fs.String("state-dir", "", "state `directory` (overrides state_dir)")
	grace := fs.Duration("grace", 10*time.Second, "how long shutdown waits for clients before closing them")
	pidfile := fs.String("pidfile", "", "write the daemon's pid to this `file` once it serves, and remove it on exit (for an init script without systemd: sluice(8)); an upgrade (SIGUSR2) writes the new pid")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	up, err := handover.TakeChild("daemon")
	if err != nil {
		fmt.Fprintln(stderr, "sluice serve:", err)
		return 1
	}
	if up != nil {
		defer up.Close()
		defer handover.CloseFiles(up.Files)
	}
	cfg := serveConfig(*path, *stateDir, stderr)
	if cfg == nil {
		return 1
	}
	log, level, closeLog := app.NewLogger(cfg, stderr)
	defer closeLog()
	applyProcs(cfg.Procs, log)
	if !rootPhase(cfg) { // the unprivileged phase it execs warns
		for _, w := range configWarnings(ctx, *path, cfg, "") {
			log.Warn(w)
		}
	}
	// From here on a signal is kept for the loop below, not left to its
	// default action: a SIGTERM while the daemon starts stops it cleanly
	// once it has started.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if up != nil {
		// Ready: the old daemon stops (its state written) before this one
		// reads the state and serves.
		up.Take(log, *grace)
	}
	d, err := startUnlessStopped(sigs, log, func(stop context.Context) (*app.Daemon, error) {
		return start(stop, cfg, *path, *stateDir, log, level, up)
	})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	s := &serveState{cfg: cfg, path: *path, stateDir: *stateDir, pidfile: *pidfile, grace: *grace, log: log, level: level, sd: notifySystemd(log), sigs: sigs}
	for {
		code, next := s.run(ctx, d, up)
		if next == nil {
			if s.pidfile != "" && !s.upgraded {
				if err := removePidFile(s.pidfile); err != nil {
					log.Warn("cannot remove the pid file", "err", err)
				}
			}
			return code
		}
		d, up = next, nil // an upgrade failed after this process stopped: serve again
	}
}

// serveState is what serve keeps across the daemons it runs (one, or
// another after an upgrade that failed late).
type serveState struct {
	cfg            *config.Config
	path, stateDir string
	pidfile        string // -pidfile, or ""
	upgraded       bool   // a new process serves: the pid file is its
	grace          time.Duration
	log            *slog.Logger
	level          *slog.LevelVar
	sd             *sdnotify.Notifier
	sigs           chan os.Signal
}

// run serves with d until it stops; a daemon to run next is returned
// when an upgrade failed after d stopped. up, if set, is the conversation
// with the daemon this one took over from.
func (s *serveState) run(ctx context.Context, d *app.Daemon, up *handover.Child) (int, *app.Daemon) {
	d.SetVersion(versionString())
	d.Start()
	reload := reloader(d, s.sd, s.log)
	defer background(func(ctx context.Context) {
		if err := d.Watch(ctx, 500*time.Millisecond, reload); err != nil {
			s.log.Warn("not watching the configuration file; reload with SIGHUP", "err", err)
		}
	})()
	src := "embedded defaults"
	if s.path != "" {
		src = s.path
	}
	if s.pidfile != "" {
		if err := writePidFile(s.pidfile); err != nil {
			s.log.Error("cannot write the pid file; stopping", "err", err)
			if up != nil {
				up.Close()
			}
			shutdown(d, s.log, 0, s.sigs)
			return 1, nil
		}
	}
	s.log.Info("sluice started", "version", versionString(), "config", src, "state_dir", s.cfg.StateDir, "socket_dir", s.cfg.SocketDir(), "pid", os.Getpid())
	if up != nil {
		up.Serving(s.log)
	}
	_ = s.sd.Ready("serving")
	defer background(func(ctx context.Context) {
		s.sd.Watchdog(ctx, func() bool { return d.Alive(s.sd.WatchdogInterval() / 2) })
	})()
	return s.serveUntilStop(ctx, d, reload)
}

// serveConfig loads the configuration for serve, with -state-dir applied,
// and checks that its files can be reached; on errors it prints them and
// returns nil.
func serveConfig(path, stateDir string, stderr io.Writer) *config.Config {
	cfg, errs := loadConfig(path)
	if stateDir != "" && cfg != nil {
		cfg.StateDir = stateDir
	}
	if len(errs) == 0 {
		errs = append(cfg.CheckAccess(), cfg.CheckFileOwners()...)
	}
	if len(errs) == 0 {
		return cfg
	}
	for _, e := range errs {
		fmt.Fprintln(stderr, e)
	}
	fmt.Fprintln(stderr, "sluice serve: configuration has errors; not starting")
	return nil
}

// reloader returns the reload action: it tells systemd a reload is under
// way and how it ended, for SIGHUP and for a change of the file alike.
func reloader(d *app.Daemon, sd *sdnotify.Notifier, log *slog.Logger) func() {
	var mu sync.Mutex
	return func() {
		mu.Lock()
		defer mu.Unlock()
		_ = sd.Reloading()
		status := "serving"
		if err := d.Reload(); err != nil {
			log.Error("reload failed", "err", err)
			status = "serving; the last reload failed, see the log"
		}
		_ = sd.Ready(status)
	}
}

// background runs fn in a goroutine until the returned stop is called;
// stop cancels fn's context and waits for fn to return.
func background(fn func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	return func() { cancel(); <-done }
}

// serveUntilStop reloads on SIGHUP, upgrades on SIGUSR2, and shuts down
// on another signal, when ctx ends or when a listener fails (then exiting
// 1, so that the service manager restarts us). A daemon to run next is
// returned when an upgrade failed after d stopped.
func (s *serveState) serveUntilStop(ctx context.Context, d *app.Daemon, reload func()) (int, *app.Daemon) {
	for {
		select {
		case <-ctx.Done():
			_ = s.sd.Stopping()
			return shutdown(d, s.log, s.grace, s.sigs), nil
		case err := <-d.Failed():
			// A door that stopped accepting leaves its clients waiting.
			s.log.Error("shutting down: a listener failed", "err", err, "grace", s.grace)
			_ = s.sd.Stopping()
			shutdown(d, s.log, s.grace, s.sigs)
			return 1, nil
		case sig := <-s.sigs:
			switch sig {
			case syscall.SIGHUP:
				reload()
				continue
			case syscall.SIGUSR2:
				s.log.Info("upgrade: starting the executable on disk with every listener", "signal", sig.String())
				done, next, lost := upgrade(d, s)
				switch {
				case lost:
					return 1, nil
				case done || next != nil:
					s.upgraded = done
					return 0, next
				}
				continue
			}
			s.log.Info("shutting down: no new connections; waiting for clients", "signal", sig.String(), "grace", s.grace)
			_ = s.sd.Stopping()
			return shutdown(d, s.log, s.grace, s.sigs), nil
		}
	}
}

// notifySystemd returns the systemd notifier ($NOTIFY_SOCKET), or nil
// (which does nothing) when there is none or it is malformed.
func notifySystemd(log *slog.Logger) *sdnotify.Notifier {
	sd, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("not notifying systemd", "err", err)
		return nil
	}
	return sd
}

// shutdown runs the two stages: drain for up to grace (a second signal
// cuts it short), then close what is left.
func shutdown(d *app.Daemon, log interface{ Info(string, ...any) }, grace time.Duration, sigs <-chan os.Signal) int {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		select {
		case s := <-sigs:
			log.Info("second signal: closing every connection now", "signal", s.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := d.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return 1
	}
	return 0
}
