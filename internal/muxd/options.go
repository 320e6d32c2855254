// Package muxd is the mimedefang-multiplexor daemon that `sluice mux` runs
// (docs/protocols/mimedefang-multiplexor.md, "Startup", "Pid and lock
// files", "Modes and backlog", "Signals"): it daemonizes, drops
// privileges, takes the lock and pid files, binds the sockets, and wires
// the worker pool, the multiplexor, the -N socket map, the -O notifier and
// the optional status page together until SIGTERM. Package cli parses the
// reference's command line into Options; this package runs them.
//
// Differences from the reference, on purpose:
//   - Daemon mode (no -D) cannot fork in Go: the process re-executes itself
//     detached (new session, stdio on /dev/null) with the pid file and a
//     report pipe inherited, and exits 0 once the daemon reports it is
//     serving, or 1 with "Error from child: <msg>", as the reference's
//     parent does. The daemon is a session leader (the reference forks
//     twice so that it is not); it never opens a terminal.
//   - The pid and lock files are opened with O_NOFOLLOW and O_NONBLOCK and
//     refused unless they are regular files with one link owned by root or
//     the -U user (openOwnFile); the reference follows a symbolic link
//     there, as root for the pid file.
//   - Errors the reference only sends to syslog (pid file, privilege drop)
//     are printed too. The log goes to the local syslog socket (/dev/log)
//     with the -Y ident and -S facility, as openlog(3) with LOG_PID does;
//     when that socket does not exist, to stderr, after one notice.
//   - -d writes sluice's own event-loop trace (one timestamped line per
//     event the pool's owner loop handles); the reference's lines (from its
//     event library, and only in builds with DEBUG_EVENT) differ.
//   - The -N socket map (docs/protocols/mimedefang-multiplexor.md, "Socket
//     map") answers as the reference does; like the reference it is created
//     after the pool starts, a failure to create it is only logged, and its
//     socket file is left behind at exit.
package muxd

import "time"

// Options is one run of the daemon: the reference's command line, parsed
// and clamped by the caller, plus what sluice adds. Durations of zero mean
// "none" where the reference's 0 does (-V, -W, -X, -L).
type Options struct {
	Prog       string // prefixes startup errors ("sluice mux" or argv[0])
	Version    string // sluice's version, for the status page
	Foreground bool   // -D: do not daemonize
	User       string // -U
	Spool      string // -z: the working directory
	Socket     string // -s
	Restricted string // -a: the unprivileged socket, "" for none
	Program    string // -f
	Rules      string // -F, "" for the program's default
	PidFile    string // -p
	LockFile   string // -o (or <pidfile>.lock)
	Group      bool   // -G: group-writable sockets
	Verbose    bool   // -l

	MinWorkers, MaxWorkers, MaxRequests int           // -m -x -r
	Lifetime                            time.Duration // -V
	Idle, Busy, Cmd, Slew, Spacing      time.Duration // -i -b -c -w -W
	Queue                               int           // -q
	QueueTimeout                        time.Duration // -Q
	DomainLimit                         int           // -y
	Backlog                             int           // -I

	Facility, Label       string        // -S -Y
	Stats                 string        // -t
	StatsSyslog, Flush    bool          // -T -u
	StatusPipe            bool          // -Z
	DebugEvents, SchedLog bool          // -d -A
	Autoscale             bool          // -k
	Embed                 bool          // -E: workers forked from one perl (pool.Config.Embed)
	RLimitRSS, RLimitAS   uint64        // -R -M, bytes; 0 for none
	LogInterval           time.Duration // -L
	Tick                  time.Duration // -X
	Ticks                 int           // -P
	NotifySocket          string        // -O
	MapSocket             string        // -N

	EventLog     string // -d's file
	SyslogSocket string // "" for /dev/log
	Web          string // the status page's listen spec, "" for none
}
