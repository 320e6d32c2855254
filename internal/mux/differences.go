package mux

// Difference is one way sluice mux differs on purpose from Debian's
// mimedefang-multiplexor 3.3. Differences is the only list of them: the
// README's summary and docs/mux.md's section are generated from it (and
// checked by TestDifferencesDocs), and a differential test that tolerates
// a difference cites its ID.
type Difference struct {
	ID      string // what tests cite
	Summary string // the README's bullet (Markdown, one sentence part)
	Detail  string // docs/mux.md's bullet (Markdown)
}

// Differences are the deliberate differences, in the order the
// documentation lists them.
var Differences = []Difference{
	{ID: "no-select-limit",
		Summary: "no `select()` limit: descriptors at or above 1024 work",
		Detail:  "Go has no `select()` limit: descriptors at or above 1024 work."},
	{ID: "daemon-reexec",
		Summary: "daemon mode re-executes itself detached instead of forking (Go cannot fork); the parent still exits 0 once the daemon serves, or 1 with `Error from child: <msg>`",
		Detail: "Daemon mode cannot fork in Go: the process re-executes itself detached (a session leader, stdio on " +
			"`/dev/null`); the parent exits 0 once the daemon serves, or 1 with `Error from child: <msg>`."},
	{ID: "rlimit-shim",
		Summary: "`-R`/`-M` limits are set by an exec shim (sluice re-executes itself, calls setrlimit, execs the worker; never a shell)",
		Detail: "`-R`/`-M` are applied by an exec shim (sluice re-executes itself as `/proc/self/exe`, calls setrlimit, " +
			"then execs the worker; no shell). A failed setrlimit is reported on the worker's stderr, so it is logged only with `-l`."},
	{ID: "embed-zygote",
		Summary: "`-E` forks the workers from a separate perl process that compiled the filter once (no interpreter inside the multiplexor)",
		Detail: "`-E` forks the workers from a separate `perl` process that compiled the `-f` program once, not from an " +
			"interpreter inside the multiplexor ([How it works](#how-it-works)): a worker started for a request answers " +
			"in 7.0 ms where the reference's takes 3.6 ms (134-139 ms without `-E`), with the same memory per worker. The compile (at the first activation and after each reread) does not stop the multiplexor, as the reference's in-process compile does: status and requests for idle workers are served meanwhile."},
	{ID: "exec-failure",
		Summary: "a worker program that cannot be executed fails the activation at once",
		Detail: "Without `-R`/`-M`, a worker program that cannot be executed fails the activation: " +
			"`error: Unable to activate worker`."},
	{ID: "eof-worker",
		Summary: "a worker whose stdout reached EOF is never chosen again",
		Detail: "A worker whose stdout hit EOF is never chosen again; the reference may still hand it the next request " +
			"before it is reaped. A worker reaped while busy gets up to 1 s to deliver its output."},
	{ID: "queue-on-reap",
		Summary: "a queued request is also served when a slot comes free by a reap (the reference waits for a worker to finish a command, or for `-Q`)",
		Detail: "The queue is also served when a slot comes free by a reap or a bring-up, not only when a worker finishes " +
			"a command (the reference leaves a request queued until `-Q` while all workers are recycled); when no worker " +
			"can be started then (`-W`, a failed fork), the request stays queued."},
	{ID: "syslog",
		Summary: "errors the reference sends only to syslog are printed too; without `/dev/log` the log goes to stderr; a stuck syslog drops log lines rather than blocking the pool",
		Detail: "Errors the reference sends only to syslog (pid file, privilege drop) are printed too. " +
			"Without `/dev/log`, the log goes to stderr after one notice; a message that cannot be queued (syslog stuck) " +
			"is dropped rather than blocking the pool."},
	{ID: "pid-file-nofollow",
		Summary: "the pid and lock files are never opened through a symbolic link: anything at `-p` or `-o` but a regular file " +
			"with one link, owned by root or the `-U` user, is refused (the reference follows a link there, as root for `-p`)",
		Detail: "The pid and lock files are never opened through a symbolic link or as anything but a regular file with one " +
			"link owned by root or the `-U` user ([The pid and lock files](#the-pid-and-lock-files)); the reference " +
			"follows a link there. A refused lock file gives `Could not open lock file <path>: <why>` where the reference " +
			"says `Cannot lock lockfile: Is another copy running?` for any lock file it cannot open."},
	{ID: "drop-bounding-set",
		Summary: "started as root, `-U` also empties the capability bounding set of the multiplexor and its workers (the reference keeps it whole)",
		Detail: "Started as root, the switch to `-U` is an exec of sluice itself (the pid file, opened as root, passed " +
			"across) after the capability bounding set is emptied: every thread of the multiplexor, of an upgrade's and " +
			"of every worker has `CapBnd` 0 ([security.md](security.md#sluice-mux)); the reference's keeps the full set."},
	{ID: "stats-disk",
		Summary: "a hung disk drops stats lines rather than blocking the pool",
		Detail: "Stats file lines go through a 4096-byte buffer as the reference's stdio does; a write error is logged once " +
			"per run of failures, and lines are dropped rather than blocking the pool if the disk hangs."},
	{ID: "debug-trace",
		Summary: "`-d` writes sluice's own event trace",
		Detail:  "`-d` writes sluice's own event trace to `/var/log/mdefang-event-debug.log`."},
	{ID: "autoscale",
		Summary: "`-k` (3.7.1's autoscaling) is accepted and the `autoscale` command answered, as 3.7.1 does",
		Detail: "`-k` (3.7.1's autoscaling, which 3.3 rejects) is accepted and makes 3.7.1's decisions, and the " +
			"`autoscale` command is answered by the multiplexor with or without `-k` (3.3 hands it to a worker): " +
			"see [MIMEDefang versions](#mimedefang-versions)."},
	{ID: "own-version",
		Summary: "`sluice mux -v` adds sluice's own version (under the reference's name, `-v` is the reference's line; `version` answers `3.3`)",
		Detail: "`sluice mux -v` and `-h` add sluice's version and options to the reference's texts; under the name " +
			"`mimedefang-multiplexor` both are the reference's, byte for byte. The `version` command answers `3.3`."},
	{ID: "unhandled-signals",
		Summary: "SIGUSR1, which kills the reference, is ignored",
		Detail:  "SIGUSR1 is ignored; its default action kills the reference, leaving its sockets and pid file."},
	{ID: "upgrade-in-place",
		Summary: "SIGUSR2 upgrades in place to the binary on disk, refusing no request (the reference has no upgrade; the signal kills it)",
		Detail: "SIGUSR2 starts the binary on disk with the listening sockets, the pid file and the lock file inherited; " +
			"the new multiplexor serves once a worker of its own answers, the old one stops accepting, answers what it " +
			"accepted and exits ([Upgrade in place](#upgrade-in-place-sigusr2)). The reference has no upgrade: SIGUSR2 " +
			"kills it. For the hand-over the lock is an open file description lock (`F_OFD_SETLK`), which conflicts " +
			"with the reference's `fcntl` lock as before."},
	{ID: "ctl-bounds",
		Summary: "`sluice ctl` bounds its connect and exchange where md-mx-ctrl waits for ever, and reports a server that closes early as an error",
		Detail: "`sluice ctl` bounds the connect (30 s) and the exchange (5 min) where md-mx-ctrl waits forever; a server " +
			"that closes early is an error (status 1), not death by SIGPIPE; missing numbers print 0."},
	{ID: "ctl-json",
		Summary: "`sluice ctl jsonstatus` and `jsonload1 N` print 3.7.1's JSON (md-mx-ctrl 3.3 sends them to the multiplexor as unknown commands)",
		Detail: "`sluice ctl jsonstatus` and `jsonload1 N` print md-mx-ctrl 3.7.1's JSON; md-mx-ctrl 3.3 sends them " +
			"to the multiplexor as unknown commands, which a worker answers."},
	{ID: "socketmap-conns",
		Summary: "the socket map (`-N`) serves at most 4096 connections at once, closing more at once",
		Detail: "The socket map (`-N`) serves at most 4096 connections at once (`netserve.DefaultMaxConns`); a connection " +
			"beyond that is closed at once, with a log line at the 1st, 2nd, 4th, 8th... refusal. The reference has no cap " +
			"below its descriptor limit. A panic serving one map or notification connection closes that connection only."},
}

// VersionChoice is one behaviour in which MIMEDefang 3.3 (Debian 12's
// package) and 3.7.1 (upstream's current release) differ, and the one
// sluice follows. VersionChoices is the only list of them: docs/mux.md's
// section "MIMEDefang versions" is generated from it (TestDifferencesDocs).
// Every entry that follows 3.3 is a remaining difference from 3.7.1, and
// says why; the deliberate differences (Differences) apply to both
// versions, except "autoscale" and "ctl-json", which are 3.7.1's.
type VersionChoice struct {
	ID        string // what tests cite
	Behaviour string // what it is about (Markdown, a table cell)
	Follows   string // "3.3" or "3.7.1"
	Why       string // what the other version does, and why sluice does not (Markdown, a table cell)
}

// VersionChoices are the behaviours 3.3 and 3.7.1 differ in, in the order
// docs/mux.md lists them.
var VersionChoices = []VersionChoice{
	{ID: "autoscale-command", Follows: "3.7.1",
		Behaviour: "`autoscale` command: `enabled=%d interval=15 ema_busy=%.4f scale_out=0.80 scale_in=0.30 " +
			"out_cool=5 in_cool=30 ema_alpha=0.2500`, answered by the multiplexor with or without `-k` (main socket only)",
		Why: "3.3 hands `autoscale` to a worker; answering it costs nothing and upstream's `t/autoscale.t` expects it."},
	{ID: "autoscale-k", Follows: "3.7.1",
		Behaviour: "`-k` autoscaling: every 15 s `ema = 0.75 ema + 0.25 busy/running`; one worker started above 0.80, " +
			"one idle worker (the last to become idle) stopped below 0.30; cool-downs counted in whole seconds; every " +
			"activation is a scale-out (a request that finds no idle worker starts one at once); the `Autoscale:` log lines",
		Why: "3.3 rejects `-k`. The scale-out when a request has to queue, added upstream before 3.7.1 and removed " +
			"again before its release, is not 3.7.1's and not sluice's."},
	{ID: "ctl-json", Follows: "3.7.1",
		Behaviour: "md-mx-ctrl `jsonstatus` and `jsonload1 N`",
		Why:       "3.3 sends them to the multiplexor as unknown commands; the JSON is new output, nothing relies on 3.3's."},
	{ID: "lock-derived", Follows: "3.7.1",
		Behaviour: "the lock file derived from `-p` (`<pidfile>.lock`) is removed at exit",
		Why:       "3.3 leaves it on disk; removing it is upstream's fix."},
	{ID: "help-text", Follows: "3.3",
		Behaviour: "the `help` reply (which md-mx-ctrl prints for `-h`)",
		Why: "3.7.1 adds `jsonload1`, `jsonstatus`, `rawstatus`, `barstatus` and `autoscale` lines and re-aligns " +
			"three. Debian 12's md-mx-ctrl prints the reply as its usage, and the differential tests compare it " +
			"with Debian's multiplexor byte for byte; sluice's commands are documented here and in md-mx-ctrl(8)."},
	{ID: "version", Follows: "3.3",
		Behaviour: "`version` (`3.3`), `-v` and the usage text (`-h`) under the name `mimedefang-multiplexor`",
		Why: "3.7.1 says `3.7.1` and lists `-k` in its usage. sluice is not 3.7.1 in full (the help and stderr " +
			"rows), and on a Debian 12 host the milter and `mimedefang.pl` beside it are 3.3; `sluice mux -h` lists `-k`."},
	{ID: "stderr-pieces", Follows: "3.3",
		Behaviour: "a worker's stderr is read, and logged with `-l`, in pieces of 63 bytes (a longer line is " +
			"several `Worker N stderr:` lines)",
		Why: "3.7.1 reads 1023 bytes at a time (upstream issue #84). Debian 12's log readers see 3.3's lines, and " +
			"the differential fuzzer compares the log of stderr floods with Debian's multiplexor line for line."},
}

// LookupDifference returns the difference with id. Only tests call it:
// internal/cli's, which name the difference a behaviour they check is.
func LookupDifference(id string) (Difference, bool) {
	for _, d := range Differences {
		if d.ID == id {
			return d, true
		}
	}
	return Difference{}, false
}

// FuzzCauses are what the differential fuzzer (TestMuxDifferentialFuzz,
// internal/cli/mux_fuzz_test.go) may measure in one of its runs to
// explain a difference from the reference that is no difference of
// sluice's: a run the fuzzer does not judge, and plays again. The fuzzer
// cites a cause by its ID (Summary is the log's words, Detail
// docs/mux.md's bullet, generated and checked by TestDifferencesDocs);
// any other difference fails the schedule.
var FuzzCauses = []Difference{
	{ID: "late-sender",
		Summary: "a request sender of the fuzzer woke later than half the schedule's margin between events",
		Detail: "`late-sender`: a sender of the fuzzer woke late by half the schedule's 50 ms margin or more (it measures " +
			"every sender), so two events the schedule keeps apart may have come in either order: the run is logged and " +
			"played again; three such runs in a row fail, as does a difference without one."},
}
