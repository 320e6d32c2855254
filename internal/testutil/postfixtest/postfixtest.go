// Package postfixtest runs a private, throw-away Postfix instance whose
// configuration, queue, data and log all live under one directory owned by
// the caller, so that tests and benchmarks can exercise real Postfix daemons
// (smtpd, anvil, qmgr, ...) without touching /etc/postfix, /var/spool/postfix
// or the system's Postfix instance.
//
// The instance is started by running Postfix's master(8) daemon directly as
// a child process of the caller ("master -c <Dir>/etc"); the postfix(1)
// wrapper command is not used. Start writes main.cf and master.cf, creates
// the queue directories with the ownership that postfix-files(5) prescribes,
// starts master and waits until it is ready. Stop terminates master and every
// process master spawned, and waits until they are gone (reaping them
// itself, so no zombies are left for init).
//
// If the owning process dies without calling Stop (a test binary killed by
// -timeout, say), the instance keeps running: master clears any
// parent-death signal when it switches its effective uid. Find leftovers
// with "ps -eo pid,args | grep 'master -c'" and SIGTERM the master pid.
//
// Running Postfix needs root (master refuses to run otherwise) and the
// Debian/Ubuntu layout of the postfix package (daemons in
// /usr/lib/postfix/sbin). Callers should check Available first and skip
// loudly when it returns an error.
//
// Layout under Options.Dir:
//
//	etc/      config_directory: main.cf, master.cf
//	queue/    queue_directory (private/, public/, pid/, incoming/, ...)
//	data/     data_directory (master.lock, caches)
//	maillog   maillog_file, written by postlogd(8); nothing goes to syslog
package postfixtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/internal/testutil/smtptest"
)

// Paths of the Debian postfix package (Postfix 3.7 on Debian 12).
const (
	commandDir = "/usr/sbin"
	daemonDir  = "/usr/lib/postfix/sbin"
	shlibDir   = "/usr/lib/postfix"
	metaDir    = "/etc/postfix"
)

// Timeouts for bringing an instance up and down.
const (
	startTimeout   = 20 * time.Second
	stopTermWait   = 10 * time.Second
	stopKillWait   = 5 * time.Second
	reapGraceWait  = 3 * time.Second
	pollInterval   = 50 * time.Millisecond
	logTailLines   = 30
	maxUnixPathLen = 107 // sizeof(sockaddr_un.sun_path) - 1 on Linux
)

// requiredDaemons are the daemon programs referenced by the generated
// master.cf; Available checks that each exists.
var requiredDaemons = []string{
	"master", "smtpd", "cleanup", "qmgr", "trivial-rewrite", "bounce",
	"verify", "flush", "proxymap", "showq", "error", "discard", "scache",
	"postlogd", "anvil",
}

// Options configures a private Postfix instance.
type Options struct {
	// Dir is the root directory for configuration, queue, data and log.
	// Required; tests pass t.TempDir(). It is created if missing, and
	// may be reused after Stop (the maillog is then appended to). Every
	// ancestor of Dir must be searchable by the postfix user: Start adds
	// o+x to Dir and to ancestors that lie inside os.TempDir()
	// (t.TempDir() creates a 0700 parent), and fails for any other
	// unsearchable ancestor. The path must not contain blanks, commas or
	// "$", and <Dir>/queue/private/anvil should stay under 108 bytes if
	// an external anvil server is to bind it.
	Dir string

	// SMTPPort, if > 0, adds the master.cf service
	// "127.0.0.1:<port> inet n - n - - smtpd". Zero means no SMTP listener.
	SMTPPort int

	// OwnAnvil, if true, keeps Postfix's own anvil(8) service
	// ("anvil unix - - n - 1 anvil") in master.cf. If false there is no
	// anvil service, and an external server (sluice) must listen on
	// AnvilSocketPath itself. Until one does, smtpd logs "connect to
	// private/anvil: No such file or directory", spends about a second
	// retrying on each client connect and disconnect, and enforces no
	// client limits.
	OwnAnvil bool

	// MainCF holds extra main.cf parameters; they override the defaults
	// written by Start (for example smtpd_client_connection_count_limit).
	// Names and values must not contain newlines.
	MainCF map[string]string

	// Logf, if set, receives progress messages. If nil, progress is logged
	// with slog at debug level.
	Logf func(format string, args ...any)
}

// Instance is a running private Postfix instance. Its methods are safe for
// concurrent use.
type Instance struct {
	dir      string
	confDir  string
	queueDir string
	dataDir  string
	logPath  string
	logf     func(format string, args ...any)

	pid     int
	stderr  *smtptest.Buffer
	done    chan struct{} // closed when master has exited and been reaped
	waitErr error         // master's exit status; valid after done is closed

	stopOnce sync.Once
	stopErr  error
}

// availableOnce caches the result of Available: the answer cannot change
// while a test binary runs.
var availableOnce = sync.OnceValue(checkAvailable)

// Available reports whether a private Postfix instance can run here. It
// returns nil when the process runs as root, the Postfix binaries are
// installed at the Debian paths, Postfix is at least version 3.4 (for
// maillog_file and postlogd), and the postfix user and postdrop group exist;
// otherwise the error says exactly which of these is missing, so callers can
// skip loudly.
func Available() error {
	return availableOnce()
}

func checkAvailable() error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, fmt.Errorf("not running as root (euid %d): the Postfix master daemon refuses to run unprivileged", os.Geteuid()))
	}
	for _, d := range requiredDaemons {
		p := filepath.Join(daemonDir, d)
		if err := checkExecutable(p); err != nil {
			errs = append(errs, fmt.Errorf("postfix daemon %s: %w", d, err))
		}
	}
	postconf := filepath.Join(commandDir, "postconf")
	if err := checkExecutable(postconf); err != nil {
		errs = append(errs, fmt.Errorf("postconf: %w", err))
	} else if v, err := postfixVersion(postconf); err != nil {
		errs = append(errs, err)
	} else if !versionAtLeast(v, 3, 4) {
		errs = append(errs, fmt.Errorf("postfix %s is too old: maillog_file/postlogd need >= 3.4", v))
	}
	if _, err := user.Lookup("postfix"); err != nil {
		errs = append(errs, fmt.Errorf("user postfix: %w", err))
	}
	if _, err := user.LookupGroup("postdrop"); err != nil {
		errs = append(errs, fmt.Errorf("group postdrop: %w", err))
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		errs = append(errs, fmt.Errorf("no /proc (needed to track postfix processes): %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("postfix not available: %w", errors.Join(errs...))
	}
	return nil
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

func postfixVersion(postconf string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, postconf, "-d", "-h", "mail_version").Output()
	if err != nil {
		return "", fmt.Errorf("%s -d -h mail_version: %w", postconf, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// versionAtLeast reports whether the dotted version v is >= major.minor.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// PostfixUID returns the uid and primary gid of the "postfix" user, for
// chowning a socket that Postfix daemons must connect to.
func PostfixUID() (uid, gid int, err error) {
	u, err := user.Lookup("postfix")
	if err != nil {
		return 0, 0, fmt.Errorf("look up user postfix: %w", err)
	}
	uid, err = strconv.Atoi(u.Uid)
	if err != nil {
		return 0, 0, fmt.Errorf("user postfix uid %q: %w", u.Uid, err)
	}
	gid, err = strconv.Atoi(u.Gid)
	if err != nil {
		return 0, 0, fmt.Errorf("user postfix gid %q: %w", u.Gid, err)
	}
	return uid, gid, nil
}

func postdropGID() (int, error) {
	g, err := user.LookupGroup("postdrop")
	if err != nil {
		return 0, fmt.Errorf("look up group postdrop: %w", err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("group postdrop gid %q: %w", g.Gid, err)
	}
	return gid, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. As
// with any such helper, another process may grab it before it is used.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free loopback port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find free loopback port: close listener: %w", err)
	}
	return port, nil
}

// Start writes main.cf and master.cf under o.Dir, creates the queue and data
// directories with Postfix's ownership (postfix, postfix:postdrop for
// maildrop/ and public/), starts the master daemon as a child process and
// waits until it is ready: master has locked its pid file and logged
// "daemon started" and, if o.SMTPPort > 0, the SMTP port is in LISTEN state.
// Readiness is checked without connecting, so anvil's counters are
// untouched. ctx bounds the start-up only (at most ~20 s in any case), not
// the instance's lifetime; call Stop when done. On failure nothing is left
// running and the error includes the tail of the maillog and master's
// stderr.
func Start(ctx context.Context, o Options) (*Instance, error) {
	if o.Dir == "" {
		return nil, errors.New("postfixtest: Options.Dir is required")
	}
	if err := Available(); err != nil {
		return nil, err
	}
	if o.SMTPPort < 0 || o.SMTPPort > 65535 {
		return nil, fmt.Errorf("postfixtest: SMTPPort %d out of range", o.SMTPPort)
	}
	dir, err := smtptest.InstanceDir(o.Dir)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(dir, "$\n\r\t ,") {
		return nil, fmt.Errorf("postfixtest: instance dir %q contains characters that main.cf would mangle ($, blanks, commas)", dir)
	}
	i := &Instance{
		dir:      dir,
		confDir:  filepath.Join(dir, "etc"),
		queueDir: filepath.Join(dir, "queue"),
		dataDir:  filepath.Join(dir, "data"),
		logPath:  filepath.Join(dir, "maillog"),
		logf:     o.Logf,
		done:     make(chan struct{}),
		stderr:   &smtptest.Buffer{Limit: 64 << 10},
	}
	if i.logf == nil {
		i.logf = func(format string, args ...any) {
			slog.Debug(fmt.Sprintf(format, args...), "pkg", "postfixtest")
		}
	}
	if err := i.setup(o); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := i.startMaster(); err != nil {
		return nil, err
	}
	if err := i.waitReady(ctx, o.SMTPPort); err != nil {
		stopErr := i.Stop()
		return nil, fmt.Errorf("start master %s: %w%s", i.confDir, errors.Join(err, stopErr), i.diagnostics())
	}
	i.logf("postfixtest: instance %s ready after %v (master pid %d, smtp port %d, own anvil %v)", dir, time.Since(t0).Round(time.Millisecond), i.pid, o.SMTPPort, o.OwnAnvil)
	return i, nil
}

// setup creates the directory tree and configuration files.
func (i *Instance) setup(o Options) error {
	uid, gid, err := PostfixUID()
	if err != nil {
		return err
	}
	dropGID, err := postdropGID()
	if err != nil {
		return err
	}
	if err := ensureSearchable(i.dir, uid, gid, i.logf); err != nil {
		return err
	}

	type dirSpec struct {
		path     string
		uid, gid int
		mode     fs.FileMode
	}
	dirs := []dirSpec{
		{i.confDir, 0, 0, 0o755},
		{i.queueDir, 0, 0, 0o755},
		{i.dataDir, uid, gid, 0o700},
		{filepath.Join(i.queueDir, "pid"), 0, 0, 0o755},
		{filepath.Join(i.queueDir, "maildrop"), uid, dropGID, 0o730},
		{filepath.Join(i.queueDir, "public"), uid, dropGID, 0o710},
	}
	for _, d := range []string{"active", "bounce", "corrupt", "defer", "deferred", "flush", "hold", "incoming", "private", "saved", "trace"} {
		dirs = append(dirs, dirSpec{filepath.Join(i.queueDir, d), uid, 0, 0o700})
	}
	for _, d := range dirs {
		if err := os.Mkdir(d.path, d.mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: %w", d.path, err)
		}
		if err := os.Chown(d.path, d.uid, d.gid); err != nil {
			return fmt.Errorf("chown %s: %w", d.path, err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", d.path, err)
		}
	}

	mainCF, err := renderMainCF(i.dir, i.confDir, i.queueDir, i.dataDir, i.logPath, o.MainCF)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(i.confDir, "main.cf"), mainCF, 0o644); err != nil {
		return fmt.Errorf("write main.cf: %w", err)
	}
	if err := os.WriteFile(filepath.Join(i.confDir, "master.cf"), renderMasterCF(o.SMTPPort, o.OwnAnvil), 0o644); err != nil {
		return fmt.Errorf("write master.cf: %w", err)
	}
	// Postfix re-reads a configuration file, sleeping 300 ms in between,
	// until its mtime is safely in the past (a guard against reading a
	// file that is being edited); that costs ~2 s per start for a file
	// written just now. Backdate both files.
	past := time.Now().Add(-time.Minute)
	for _, name := range []string{"main.cf", "master.cf"} {
		if err := os.Chtimes(filepath.Join(i.confDir, name), past, past); err != nil {
			return fmt.Errorf("backdate %s: %w", name, err)
		}
	}
	// Pre-create the log so Log works before the first message and the
	// file never has to be created by an unprivileged daemon.
	f, err := os.OpenFile(i.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("create maillog: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create maillog: %w", err)
	}
	if p := i.AnvilSocketPath(); len(p) > maxUnixPathLen {
		i.logf("postfixtest: warning: anvil socket path %s is %d bytes, longer than a unix socket address allows (%d); an external server cannot bind it by absolute path", p, len(p), maxUnixPathLen)
	}
	i.logf("postfixtest: wrote config in %s", i.confDir)
	return nil
}

// ensureSearchable makes sure the postfix user can traverse every directory
// from / down to dir: Postfix daemons open files (data/master.lock, the
// maillog) after dropping privileges. Missing search permission is added to
// dir itself and to ancestors inside os.TempDir(); elsewhere it is an error.
func ensureSearchable(dir string, uid, gid int, logf func(string, ...any)) error {
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		tmp = filepath.Clean(os.TempDir())
	}
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", p)
		}
		if !searchableBy(fi, uid, gid) {
			inTemp := p != tmp && strings.HasPrefix(p, tmp+string(filepath.Separator))
			if p != dir && !inTemp {
				return fmt.Errorf("directory %s is not searchable by the postfix user (uid %d): Postfix daemons could not reach %s; choose a Dir under %s or fix the permissions", p, uid, dir, tmp)
			}
			mode := fi.Mode().Perm() | 0o001
			if err := os.Chmod(p, mode); err != nil {
				return fmt.Errorf("make %s searchable for postfix: %w", p, err)
			}
			logf("postfixtest: chmod %o %s so the postfix user can reach the instance dir", mode, p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func searchableBy(fi fs.FileInfo, uid, gid int) bool {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return perm&0o001 != 0
	}
	switch {
	case int(st.Uid) == uid:
		return perm&0o100 != 0
	case int(st.Gid) == gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// startMaster runs "master -c <confDir>" as a child. master(8) does not fork
// by default: it calls setsid(), redirects stdio to /dev/null and stays in
// the foreground, so the child's pid is the master pid, and it is the
// session and process group id of every process master spawns.
//
// There is no parent-death signal: master briefly changes its effective
// uid to open data/master.lock, which makes Linux clear PR_SET_PDEATHSIG.
// An instance whose owner dies without calling Stop keeps running.
func (i *Instance) startMaster() error {
	master := filepath.Join(daemonDir, "master")
	cmd := exec.Command(master, "-c", i.confDir)
	cmd.Dir = i.queueDir
	// The same environment the postfix(1) command gives master: with
	// POSTLOG_SERVICE set, master's own early messages (e.g. a fatal error
	// before postlogd runs) go to the maillog instead of syslog.
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C",
		"MAIL_CONFIG=" + i.confDir,
		"MAIL_LOGTAG=postfix",
		"POSTLOG_SERVICE=" + filepath.Join(i.queueDir, "public", "postlog"),
		"POSTLOG_HOSTNAME=" + defaultHostname,
	}
	cmd.Stdout = i.stderr
	cmd.Stderr = i.stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start master %s: %w", i.confDir, err)
	}
	i.pid = cmd.Process.Pid
	i.logf("postfixtest: started %s -c %s (pid %d)", master, i.confDir, i.pid)
	go func() {
		i.waitErr = cmd.Wait()
		close(i.done)
	}()
	return nil
}

var errMasterExited = errors.New("postfix master exited during start-up")

// waitReady polls until master is up, master exits, or the deadline passes.
func (i *Instance) waitReady(ctx context.Context, smtpPort int) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	started := fmt.Sprintf("postfix/master[%d]: daemon started", i.pid)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		select {
		case <-i.done:
			return fmt.Errorf("%w (%v)", errMasterExited, i.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		case <-tick.C:
		}
		if !i.pidFileOK() {
			continue
		}
		if log, err := i.Log(); err != nil || !strings.Contains(log, started) {
			continue
		}
		if smtpPort > 0 {
			ok, err := tcpListening(smtpPort)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		return nil
	}
}

func (i *Instance) pidFileOK() bool {
	b, err := os.ReadFile(filepath.Join(i.queueDir, "pid", "master.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && pid == i.pid
}

// diagnostics returns the maillog tail and master's output for errors.
func (i *Instance) diagnostics() string {
	var b strings.Builder
	log, err := i.Log()
	if err != nil {
		log = "(" + err.Error() + ")"
	}
	b.WriteString("\n--- tail of " + i.logPath + " ---\n")
	b.WriteString(tailLines(log, logTailLines))
	if s := strings.TrimSpace(i.stderr.String()); s != "" {
		b.WriteString("\n--- master stdout/stderr ---\n")
		b.WriteString(s)
	}
	return b.String()
}

func tailLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop terminates the master daemon (SIGTERM, which master passes on to its
// children) and waits until master and every process it spawned have
// exited, escalating to SIGKILL after a grace period. It is idempotent:
// later calls return the first call's result.
func (i *Instance) Stop() error {
	i.stopOnce.Do(func() { i.stopErr = i.stop() })
	return i.stopErr
}

func (i *Instance) stop() error {
	// While master shuts down, this process is a child subreaper, so the
	// children that master leaves behind are re-parented to us instead of
	// init, and we reap them: no zombies are left for a slow init.
	release := acquireSubreaper()
	defer release()

	select {
	case <-i.done:
		i.logf("postfixtest: master pid %d had already exited (%v)", i.pid, i.waitErr)
	default:
		i.logf("postfixtest: stopping master pid %d (%s)", i.pid, i.confDir)
		// master passes SIGTERM on to its process group and exits.
		_ = syscall.Kill(i.pid, syscall.SIGTERM)
		select {
		case <-i.done:
		case <-time.After(stopTermWait):
			i.logf("postfixtest: master pid %d ignored SIGTERM for %v; killing its process group", i.pid, stopTermWait)
			_ = syscall.Kill(-i.pid, syscall.SIGKILL)
			_ = syscall.Kill(i.pid, syscall.SIGKILL)
			select {
			case <-i.done:
			case <-time.After(stopKillWait):
				return fmt.Errorf("stop master %s: pid %d did not exit after SIGKILL", i.confDir, i.pid)
			}
		}
	}

	// Wait until master's children have exited, reaping those that were
	// re-parented to us.
	deadline := time.Now().Add(stopTermWait)
	killed := false
	for {
		all, err := i.processes(true)
		if err != nil {
			return fmt.Errorf("stop master %s: %w", i.confDir, err)
		}
		live := liveOnly(reapOwn(all, i.pid))
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if killed {
				return fmt.Errorf("stop master %s: processes still running after SIGKILL: %v", i.confDir, live)
			}
			i.logf("postfixtest: killing leftover postfix processes %v", live)
			for _, p := range live {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
			killed = true
			deadline = time.Now().Add(stopKillWait)
		}
		time.Sleep(pollInterval)
	}

	// Children that init inherited (master died before Stop, or no
	// subreaper support) stay zombies until init reaps them; give it a
	// moment so "ps" right after Stop is clean. Not an error if it is slow.
	var zombies []procInfo
	for reapStart := time.Now(); ; time.Sleep(pollInterval) {
		all, err := i.processes(true)
		if err != nil {
			break
		}
		zombies = reapOwn(all, i.pid)
		if len(zombies) == 0 || time.Since(reapStart) > reapGraceWait {
			break
		}
	}
	if len(zombies) > 0 {
		i.logf("postfixtest: instance %s stopped; init has not yet reaped exited children %v", i.dir, zombies)
	} else {
		i.logf("postfixtest: instance %s stopped", i.dir)
	}
	return nil
}

// QueueDir returns the instance's queue_directory (<Dir>/queue).
func (i *Instance) QueueDir() string { return i.queueDir }

// ConfigDir returns the instance's config_directory (<Dir>/etc), the
// argument for "postconf -c" and friends.
func (i *Instance) ConfigDir() string { return i.confDir }

// PrivateDir returns <queue>/private, the directory of Postfix's private
// unix-domain sockets (owned by postfix, mode 0700).
func (i *Instance) PrivateDir() string { return filepath.Join(i.queueDir, "private") }

// AnvilSocketPath returns <queue>/private/anvil, the socket smtpd connects
// to for anvil(8) service. With OwnAnvil false an external server must
// listen here (a unix stream socket), and the socket must be connectable by
// the postfix user (chown it with PostfixUID or make it mode 0666). On
// Postfix 3.7 the server speaks first: it must send the announcement
// "protocol=anvil_protocol\n\n" on each new connection, or smtpd waits
// for it (ipc_timeout, one hour) and never greets its SMTP client.
func (i *Instance) AnvilSocketPath() string { return filepath.Join(i.queueDir, "private", "anvil") }

// Log returns the instance's maillog text so far.
func (i *Instance) Log() (string, error) {
	b, err := os.ReadFile(i.logPath)
	if err != nil {
		return "", fmt.Errorf("read maillog: %w", err)
	}
	return string(b), nil
}

// WaitLog polls the maillog until it contains substr or ctx ends. Postfix
// logs asynchronously through postlogd, so a line may appear shortly after
// the event it describes.
func (i *Instance) WaitLog(ctx context.Context, substr string) error {
	return smtptest.WaitLog(ctx, pollInterval, i.logPath, i.Log, substr)
}
