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
			"in 7.0 ms where the reference's takes 3.6 ms (134-139 ms without `-E`), with the same memory per worker."},
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
	{ID: "stats-disk",
		Summary: "a hung disk drops stats lines rather than blocking the pool",
		Detail: "Stats file lines go through a 4096-byte buffer as the reference's stdio does; a write error is logged once " +
			"per run of failures, and lines are dropped rather than blocking the pool if the disk hangs."},
	{ID: "debug-trace",
		Summary: "`-d` writes sluice's own event trace",
		Detail:  "`-d` writes sluice's own event trace to `/var/log/mdefang-event-debug.log`."},
	{ID: "autoscale",
		Summary: "`-k` (upstream HEAD's autoscaling) is accepted",
		Detail: "`-k` (upstream HEAD's autoscaling, which 3.3 rejects) is accepted and follows HEAD's description; " +
			"the `autoscale` command is answered only with `-k`."},
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
	{ID: "socketmap-conns",
		Summary: "the socket map (`-N`) serves at most 4096 connections at once, closing more at once",
		Detail: "The socket map (`-N`) serves at most 4096 connections at once (`netserve.DefaultMaxConns`); a connection " +
			"beyond that is closed at once, with a log line at the 1st, 2nd, 4th, 8th... refusal. The reference has no cap " +
			"below its descriptor limit. A panic serving one map or notification connection closes that connection only."},
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
