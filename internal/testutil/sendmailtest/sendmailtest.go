// Package sendmailtest runs real Sendmail 8.17 (Debian's sendmail-bin) as a
// private, throw-away instance whose configuration, queue and logs live
// under one directory owned by the caller, so that tests can drive a milter
// (sluice's milter door) from Sendmail's side: Sendmail is the milter
// client, and the test speaks SMTP to it.
//
// # No installation
//
// Sendmail conflicts with Postfix, which the machines have installed, so it
// is never installed. The first use downloads Debian's sendmail-bin,
// sendmail-cf, libwrap0 and m4 packages with "apt-get download" and
// unpacks them with "dpkg -x" into a cache ($XDG_CACHE_HOME/sluice-test/
// sendmail if XDG_CACHE_HOME is set, else /var/cache/sluice-test/sendmail;
// delete it to refetch). A lock file there serialises concurrent test
// binaries. The private sendmail binary runs with LD_LIBRARY_PATH pointing
// at the private libwrap.so.0, and m4 builds each instance's sendmail.cf
// from the private sendmail-cf macros. Nothing is written outside the cache
// and the instance directory: no /etc/mail, no /var/spool/mqueue.
//
// # How the client address reaches the milter
//
// There is no daemon. Each SMTPSession is one "sendmail -bs" process in
// inetd style: the harness listens on an ephemeral loopback port, dials it
// from the requested client address (any 127.0.0.0/8 address, or ::1), and
// hands the accepted TCP socket to sendmail as its stdin and stdout.
// Sendmail calls getpeername(2) on its input channel exactly as it does
// under inetd, so the milter's CONNECT carries family '4' (or '6'), the
// client's real port and address, and the name that address resolves to
// (Options.Hosts, else "[address]"): the same packet a daemon-mode
// ("-bD") Sendmail sends for a TCP client. Distinct 127.x.y.z addresses
// make distinct clients, so host classes (addresses, networks, names and
// domains via Options.Hosts) can be exercised without any real network.
//
// Each sendmail process starts in new mount, network and UTS namespaces
// (see nsShim): it cannot reach any network (its network namespace holds
// only a down loopback, so the milter must listen on a unix socket), its
// host name is Hostname (Sendmail stalls for a minute on an unqualified
// host name), /etc/hosts and /etc/nsswitch.conf are the instance's own,
// and /dev/log is a socket of the harness, which writes what Sendmail logs
// to the instance's maillog (the machines run no syslog daemon). A daemon
// on a loopback port would have been equally real for the milter but
// would share the host's network, resolver and load-average refusals; the
// per-session process also needs no start-up wait and leaves nothing
// behind when its client hangs up.
//
// # Logs
//
// Log returns Sendmail's syslog output (LogLevel 9, Milter.LogLevel 14).
// Trace returns the SMTP transcript of every session ("sendmail -X":
// "<pid> <<< command" and "<pid> >>> reply" lines). MilterDebug returns
// Sendmail's milter debug output ("-d64.10"): negotiation, the macros
// and commands sent, and each reply code received.
//
// # Requirements
//
// Root (namespaces, mounts, the packages), Debian's apt-get and dpkg with
// package lists (apt-get update), /bin/sh, mount(8). Callers check
// Available and skip loudly when it returns an error.
//
// Layout under Options.Dir:
//
//	sendmail.mc, sendmail.cf  generated configuration (see renderMC)
//	service.switch, aliases   hosts and aliases from files only; no aliases
//	hosts, nsswitch.conf      bound over /etc/hosts, /etc/nsswitch.conf
//	queue/                    QueueDirectory: accepted mail stays here
//	log.sock, maillog         the /dev/log socket and what arrived on it
//	smtp.trace, milter.debug  -X transcript and -d64.10 output
//	olddev/                   mount point used while /dev is replaced
package sendmailtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/internal/testutil/smtptest"
)

// Hostname is the instance's host name ($j): Sendmail's greeting and
// replies name it, e.g. "421 4.7.0 sluice-test.localdomain closing
// connection".
const Hostname = "sluice-test.localdomain"

// MilterName is the name of the milter in sendmail.cf (INPUT_MAIL_FILTER),
// as it appears in Sendmail's log ("Milter (sluice): ...").
const MilterName = "sluice"

// Defaults for Options.
const (
	DefaultMilterFlags    = "T"
	DefaultMilterTimeouts = "C:10s;S:10s;R:10s;E:1m"
)

// Limits.
const (
	maxUnixPathLen = 107 // sizeof(sockaddr_un.sun_path) - 1 on Linux
	pollInterval   = 50 * time.Millisecond
	probeTimeout   = 30 * time.Second
)

// Options configures a private Sendmail instance.
type Options struct {
	// Dir is the instance directory. Required; tests pass t.TempDir().
	// It is created if missing. Its absolute path may hold only letters,
	// digits and "/._-+=@" (it is written into sendmail.mc unquoted), and
	// <Dir>/log.sock must fit in a unix socket address (107 bytes).
	// Every directory above it must be writable by root only, or be
	// sticky (like /tmp): Sendmail checks the path of its queue and of
	// the milter socket.
	Dir string

	// MilterSocket is the absolute path of the unix socket the milter
	// listens on (sendmail.cf gets "S=unix:<path>"); a "unix:" prefix is
	// accepted. Empty means no milter at all. The socket need not exist
	// yet: Sendmail connects to it for each SMTP session. Its mode does
	// not matter, but no directory above it may be group- or
	// world-writable unless sticky (Sendmail's safe-file check; Prepare
	// checks the directories that exist). A TCP milter cannot be used:
	// sendmail runs in a network namespace of its own.
	MilterSocket string

	// MilterFlags is the F= equate of the milter: "T" (the default)
	// tempfails when the milter cannot be reached or times out, "R"
	// rejects, "4" answers 421 and hangs up, "" (set "-") ignores the
	// milter.
	MilterFlags string

	// MilterTimeouts is the T= equate; default DefaultMilterTimeouts
	// (connect, send and read 10 s, end of message 1 min).
	MilterTimeouts string

	// Hosts maps client IP addresses to host names for the instance's
	// /etc/hosts, so that Sendmail (and so the milter's CONNECT) sees
	// e.g. 127.0.0.2 as "client2.example". 127.0.0.1 is "localhost"
	// unless mapped here. Unmapped addresses appear as "[127.0.0.9]".
	Hosts map[string]string

	// MaxDaemonChildren, if above 0, is sendmail.mc's
	// confMAX_DAEMON_CHILDREN (the O MaxDaemonChildren line of the
	// sendmail.cf built).
	MaxDaemonChildren int

	// Logf, if set, receives progress messages. If nil, progress is
	// logged with slog at debug level.
	Logf func(format string, args ...any)
}

// Instance is a prepared private Sendmail configuration. It runs no
// process by itself; each SMTPSession runs one. Its methods are safe for
// concurrent use.
type Instance struct {
	dir          string
	milterSocket string
	tree         *tree
	logf         func(format string, args ...any)

	logConn *net.UnixConn
	logDone chan struct{}
	logMu   sync.Mutex // serialises writes to maillog

	mu       sync.Mutex
	sessions map[*Session]struct{}
	netns    map[string]bool // network namespaces of all sessions started
	stopped  bool

	stopOnce sync.Once
	stopErr  error
}

type availability struct {
	tree *tree
	err  error
}

// availableOnce caches Available's answer for the life of the test binary.
var availableOnce = sync.OnceValue(checkAvailable)

// Available reports whether a private Sendmail can run here. The first
// call may take a few seconds: it downloads and unpacks the packages into
// the cache unless a previous run left them there, and starts one empty
// process in the namespaces a session uses. It returns nil if all of that
// works; otherwise the error says what is missing (not root, no apt-get,
// no network or package lists, no namespaces), for a loud skip.
func Available() error {
	return availableOnce().err
}

func checkAvailable() availability {
	if os.Geteuid() != 0 {
		return availability{err: fmt.Errorf("sendmail not available: not running as root (euid %d): the packages are fetched with apt-get and each session runs in namespaces of its own", os.Geteuid())}
	}
	for _, p := range []string{"/bin/sh", "/bin/mount", "/bin/umount", "/proc/sys/kernel/hostname"} {
		if _, err := os.Stat(p); err != nil {
			return availability{err: fmt.Errorf("sendmail not available: %w", err)}
		}
	}
	logf := func(format string, args ...any) {
		slog.Debug(fmt.Sprintf(format, args...), "pkg", "sendmailtest")
	}
	t, err := ensureTree(logf)
	if err != nil {
		return availability{err: fmt.Errorf("sendmail not available: %w", err)}
	}
	if err := probeNamespaces(); err != nil {
		return availability{err: fmt.Errorf("sendmail not available: %w", err)}
	}
	return availability{tree: t}
}

// probeNamespaces runs nsShim with "true" in a scratch dir, to find out
// early (and skip loudly) where unshare or mount is not permitted.
func probeNamespaces() error {
	dir, err := os.MkdirTemp("", "sendmailtest-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	i := &Instance{dir: dir}
	for _, name := range []string{"hosts", "nsswitch.conf", "log.sock"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			return err
		}
	}
	if err := os.Mkdir(i.oldDevDir(), 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := i.nsCommand("/bin/true")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start a process in new mount/network/UTS namespaces: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		err = errors.Join(ctx.Err(), <-done)
	}
	if err != nil {
		return fmt.Errorf("namespace set-up (mounts, hostname) failed: %w\n%s", err, tail(out.String(), 10))
	}
	return nil
}

// Prepare writes a private Sendmail configuration under o.Dir and starts
// the harness's syslog receiver. No Sendmail process runs until
// SMTPSession. Call Stop when done (tests: t.Cleanup).
func Prepare(ctx context.Context, o Options) (*Instance, error) {
	if o.Dir == "" {
		return nil, errors.New("sendmailtest: Options.Dir is required")
	}
	av := availableOnce()
	if av.err != nil {
		return nil, av.err
	}
	if o.MilterFlags == "" {
		o.MilterFlags = DefaultMilterFlags
	} else if o.MilterFlags == "-" {
		o.MilterFlags = ""
	}
	if o.MilterTimeouts == "" {
		o.MilterTimeouts = DefaultMilterTimeouts
	}
	if strings.Trim(o.MilterFlags, "TR4") != "" || strings.Trim(o.MilterTimeouts, "CSREa:;0123456789smhd") != "" {
		return nil, fmt.Errorf("sendmailtest: invalid MilterFlags %q or MilterTimeouts %q", o.MilterFlags, o.MilterTimeouts)
	}
	if err := validateHosts(o.Hosts); err != nil {
		return nil, err
	}
	sock := strings.TrimPrefix(o.MilterSocket, "unix:")
	if sock != "" && !safePath(sock) {
		return nil, fmt.Errorf("sendmailtest: MilterSocket %q must be an absolute path of letters, digits and /._-+=@", o.MilterSocket)
	}
	if sock != "" {
		if err := checkSocketDirs(filepath.Dir(sock)); err != nil {
			return nil, err
		}
	}
	dir, err := smtptest.InstanceDir(o.Dir)
	if err != nil {
		return nil, err
	}
	if !safePath(dir) {
		return nil, fmt.Errorf("sendmailtest: instance dir %q holds characters other than letters, digits and /._-+=@", dir)
	}
	i := &Instance{
		dir:          dir,
		milterSocket: sock,
		tree:         av.tree,
		logf:         o.Logf,
		sessions:     make(map[*Session]struct{}),
		netns:        make(map[string]bool),
	}
	if i.logf == nil {
		i.logf = func(format string, args ...any) {
			slog.Debug(fmt.Sprintf(format, args...), "pkg", "sendmailtest")
		}
	}
	if p := i.logSocketPath(); len(p) > maxUnixPathLen {
		return nil, fmt.Errorf("sendmailtest: %s is %d bytes, longer than a unix socket address allows (%d): choose a shorter Dir", p, len(p), maxUnixPathLen)
	}
	if err := i.writeConfig(ctx, o); err != nil {
		return nil, err
	}
	if err := i.startLog(); err != nil {
		return nil, err
	}
	i.logf("sendmailtest: prepared %s (milter %q, F=%s; %s)", i.cfPath(), sock, o.MilterFlags, strings.ReplaceAll(i.tree.versions, "\n", ", "))
	return i, nil
}

// checkSocketDirs fails early, with a clear message, where Sendmail would
// refuse the milter socket at every session ("451 4.0.0 ... local socket
// name ... unsafe: Group writable directory"): a group- or world-writable
// directory on the way to it that is not sticky. Directories that do not
// exist yet are not checked.
func checkSocketDirs(dir string) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
			return fmt.Errorf("sendmailtest: directory %s (mode %v) on the way to the milter socket is group- or world-writable: Sendmail would refuse the socket as unsafe; use a directory such as t.TempDir()", p, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// Paths of the instance.
func (i *Instance) cfPath() string { return filepath.Join(i.dir, "sendmail.cf") }

// CFPath is the sendmail.cf the instance built.
func (i *Instance) CFPath() string        { return i.cfPath() }
func (i *Instance) queueDir() string      { return filepath.Join(i.dir, "queue") }
func (i *Instance) hostsPath() string     { return filepath.Join(i.dir, "hosts") }
func (i *Instance) oldDevDir() string     { return filepath.Join(i.dir, "olddev") }
func (i *Instance) logSocketPath() string { return filepath.Join(i.dir, "log.sock") }
func (i *Instance) logPath() string       { return filepath.Join(i.dir, "maillog") }
func (i *Instance) tracePath() string     { return filepath.Join(i.dir, "smtp.trace") }
func (i *Instance) debugPath() string     { return filepath.Join(i.dir, "milter.debug") }

// Dir returns the instance directory.
func (i *Instance) Dir() string { return i.dir }

// QueueDir returns the queue directory, where accepted messages stay.
func (i *Instance) QueueDir() string { return i.queueDir() }

// nsCommand returns the command that runs argv in new namespaces through
// nsShim, which finds the instance dir in SLUICE_SENDMAILTEST. The process
// leads a process group of its own.
func (i *Instance) nsCommand(argv ...string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", append([]string{"-c", nsShim, "sendmailtest-ns"}, argv...)...)
	cmd.Dir = i.dir
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C",
		"SLUICE_SENDMAILTEST=" + i.dir,
	}
	if i.tree != nil {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+i.tree.libDir)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:      true,
		Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS,
	}
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// startLog listens on log.sock, the socket bound over /dev/log inside the
// sessions' namespaces, and appends each datagram to maillog as a line,
// without its "<priority>" prefix.
func (i *Instance) startLog() error {
	_ = os.Remove(i.logSocketPath())
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: i.logSocketPath(), Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("listen for sendmail's syslog: %w", err)
	}
	f, err := os.OpenFile(i.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("create maillog: %w", err)
	}
	i.logConn = c
	i.logDone = make(chan struct{})
	go func() {
		defer close(i.logDone)
		defer f.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			line := string(buf[:n])
			if strings.HasPrefix(line, "<") {
				if end := strings.IndexByte(line, '>'); end > 0 && end < 5 {
					line = line[end+1:]
				}
			}
			line = strings.TrimRight(line, "\x00\n") + "\n"
			i.logMu.Lock()
			_, _ = f.WriteString(line)
			i.logMu.Unlock()
		}
	}()
	return nil
}

// Log returns what Sendmail has logged so far (its syslog messages), one
// line each, e.g. "... sm-mta[123]: 5AM2...: Milter: connect: host=...".
func (i *Instance) Log() (string, error) { return readFile(i.logPath(), "maillog") }

// Trace returns the SMTP transcript of all sessions so far (sendmail -X).
func (i *Instance) Trace() (string, error) { return readFile(i.tracePath(), "smtp trace") }

// MilterDebug returns Sendmail's milter debug output so far (-d64.10).
func (i *Instance) MilterDebug() (string, error) { return readFile(i.debugPath(), "milter debug") }

func readFile(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", what, err)
	}
	return string(b), nil
}

// WaitLog polls the maillog until it contains substr or ctx ends. Sendmail
// may log a line after the reply it describes has reached the client.
func (i *Instance) WaitLog(ctx context.Context, substr string) error {
	return smtptest.WaitLog(ctx, pollInterval, i.logPath(), i.Log, substr)
}

// Stop closes every session still open (killing its sendmail), checks
// that no process of the instance is left, and stops the log receiver. It
// is idempotent: later calls return the first call's result.
func (i *Instance) Stop() error {
	i.stopOnce.Do(func() { i.stopErr = i.stop() })
	return i.stopErr
}

func (i *Instance) stop() error {
	i.mu.Lock()
	i.stopped = true
	open := make([]*Session, 0, len(i.sessions))
	for s := range i.sessions {
		open = append(open, s)
	}
	i.mu.Unlock()
	var errs []error
	for _, s := range open {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	i.mu.Lock()
	netns := maps.Clone(i.netns)
	i.mu.Unlock()
	if err := killLeftovers(netns, i.logf); err != nil {
		errs = append(errs, err)
	}
	if i.logConn != nil {
		_ = i.logConn.Close()
		<-i.logDone
	}
	i.logf("sendmailtest: instance %s stopped", i.dir)
	return errors.Join(errs...)
}

// killLeftovers kills, by pid, every live process in one of the network
// namespaces in netns (normally none: each session reaps its own), and
// waits for them to go. A namespace exists, and so cannot be mistaken for
// another, while any process is in it.
func killLeftovers(netns map[string]bool, logf func(string, ...any)) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := pidsInNetNS(netns)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sendmailtest: processes still running after SIGKILL: %v", pids)
		}
		logf("sendmailtest: killing leftover sendmail processes %v", pids)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(pollInterval)
	}
}

// netNS returns the network namespace of pid, as "net:[inode]".
func netNS(pid int) (string, error) {
	return os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
}

// pidsInNetNS lists the live (non-zombie) processes in one of the network
// namespaces in netns.
func pidsInNetNS(netns map[string]bool) ([]int, error) {
	if len(netns) == 0 {
		return nil, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		ns, err := netNS(pid)
		if err != nil || !netns[ns] {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
