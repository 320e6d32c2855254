package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sluice/internal/config"
	"sluice/internal/nftset"
	"sluice/internal/privdrop"
	"sluice/internal/safefs"
	"sluice/internal/sdnotify"
)

// escalateHelper runs the escalation helper: as root, it owns the
// nftables table "inet sluice" and adds to it the addresses the daemon
// asks for on [mta.escalate] socket (internal/nftset).
func escalateHelper(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("escalate-helper", stderr)
	path := fs.String("c", "", "the daemon's configuration `file`, whose [mta.escalate] and user it reads (required)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: sluice escalate-helper -c FILE")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Runs as root beside the daemon: makes the nftables table [mta.escalate] table (sets flood4 and")
		fmt.Fprintln(w, "flood6, a rule dropping their members' connections to [mta.escalate] ports), adds the")
		fmt.Fprintln(w, "addresses the daemon's user asks for on [mta.escalate] socket, each for at most max_for,")
		fmt.Fprintln(w, "and deletes the table when it stops (SIGTERM, SIGINT). See docs/flood.md, \"Escalation\".")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "sluice escalate-helper:", err)
		return 1
	}
	if *path == "" {
		return fail(errors.New("-c FILE is required: the daemon's configuration names the socket and the user"))
	}
	if os.Geteuid() != 0 {
		return fail(errors.New("must run as root: it changes the nftables ruleset (the daemon stays unprivileged)"))
	}
	// Root reads the file as serve does: refused unless root owns it and
	// neither group nor others may write it or a directory above it.
	cfg, errs := loadConfig(*path)
	if len(errs) == 0 {
		errs = cfg.CheckFileOwners()
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
		}
		return 1
	}
	e := cfg.MTA.Escalate
	if e.Socket == "" {
		return fail(fmt.Errorf("%s: [mta.escalate] socket is not set: there is nothing to serve", *path))
	}
	peer := privdrop.Account{Name: "root"}
	if cfg.User != "" {
		var err error
		if peer, err = privdrop.Lookup(cfg.User); err != nil {
			return fail(fmt.Errorf("user = %q: %w", cfg.User, err))
		}
	}
	nftPath, err := lookNft()
	if err != nil {
		return fail(err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	return runHelper(ctx, log, e, peer, &nftset.Nft{Path: nftPath, Table: cfg.MTA.Escalate.Table}, fail)
}

// lookNft finds nft(8) in the system's directories only.
func lookNft() (string, error) {
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, "nft")
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("nft(8) is not installed (apt-get install nftables)")
}

// runHelper installs the table, serves the socket until a signal, and
// removes the table.
func runHelper(ctx context.Context, log *slog.Logger, e config.Escalate, peer privdrop.Account, nft *nftset.Nft, fail func(error) int) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := nft.Install(ctx, nftset.Ruleset{Ports: e.Ports, Size: e.Size}); err != nil {
		return fail(err)
	}
	defer func() {
		// The drops end with the helper: a stopped helper leaves no
		// address the daemon cannot see dropped.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := nft.Remove(rctx); err != nil {
			log.Error("escalate helper: removing the table failed", "err", err)
		}
	}()
	if err := os.Mkdir(filepath.Dir(e.Socket), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fail(err)
	}
	l, err := safefs.ListenUnix(e.Socket, safefs.Owner{UID: -1, GID: peer.GID}, 0o660)
	if err != nil {
		return fail(fmt.Errorf("listening on %s: %w", e.Socket, err))
	}
	srv := nftset.NewServer(nft, nftset.Options{UID: peer.UID, MaxFor: e.MaxFor.D(), Logger: log})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	log.Info("escalate helper: serving", "socket", e.Socket, "user", peer.Name, "table", "inet "+e.Table, "ports", e.Ports, "size", e.Size, "max_for", e.MaxFor.D().String())
	if n, err := sdnotify.FromEnv(); err == nil && n != nil {
		n.Ready("serving " + e.Socket)
	}
	select {
	case <-ctx.Done():
	case err := <-done:
		log.Error("escalate helper: the socket failed", "err", err)
	}
	srv.Close()
	return 0
}
