package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"

	"sluice/internal/app"
	"sluice/internal/config"
	"sluice/internal/handover"
	"sluice/internal/sdlisten"
)

// errStopped is start's error when a signal asked to stop first.
var errStopped = errors.New("stopped by a signal while starting")

// start takes the sockets passed by the root phase (the same program
// before its exec), by systemd or by the daemon an upgrade (up) took
// over from, runs the root phase when sluice was
// started as root with a user to run as (app.ExecUnprivileged: it does
// not return unless it fails), and builds the daemon. stop ends before
// the exec when a signal came first.
func start(stop context.Context, cfg *config.Config, path, stateDir string, log *slog.Logger, level *slog.LevelVar, up *handover.Child) (*app.Daemon, error) {
	var sockets *sdlisten.Sockets
	var err error
	if up != nil {
		sockets, err = sdlisten.FromUpgrade(up.Files, up.Names)
		// Closed at once: a socket the configuration no longer names
		// must not stay open here once the daemon closes its own.
		handover.CloseFiles(up.Files)
		up.Files = nil
	} else {
		sockets, err = sdlisten.Take(sdlisten.FromEnviron())
	}
	if err != nil {
		return nil, err
	}
	handoff, err := sdlisten.TakeHandoff()
	if err != nil {
		sockets.Close()
		return nil, err
	}
	if handoff == nil {
		if err := app.ExecUnprivileged(stop, cfg, os.Args, sockets, log); err != nil {
			sockets.Close()
			return nil, err
		}
	}
	return app.New(cfg, path, log, level, app.WithSockets(sockets), app.WithHandoff(handoff), app.WithStateDir(stateDir), app.WithStop(stop))
}

// startUnlessStopped runs start in its own goroutine and returns what it
// built, unless SIGTERM or SIGINT arrives first: then the start is
// abandoned at once (errStopped), and what it still builds is shut down
// when it is done. No step of a start (a user lookup, a state file, a
// Redis connection) can keep a stop waiting. A SIGHUP during the start
// changes nothing: the configuration is read as the start begins.
func startUnlessStopped(sigs <-chan os.Signal, log *slog.Logger, start func(stop context.Context) (*app.Daemon, error)) (*app.Daemon, error) {
	type built struct {
		d   *app.Daemon
		err error
	}
	stop, cancel := context.WithCancel(context.Background())
	done := make(chan built, 1)
	go func() {
		d, err := start(stop)
		done <- built{d, err}
	}()
	for {
		select {
		case b := <-done:
			cancel()
			return b.d, b.err
		case s := <-sigs:
			if s == syscall.SIGHUP {
				log.Info("SIGHUP while starting: the configuration was read as the start began; send it again to reload")
				continue
			}
			if s == syscall.SIGUSR2 {
				log.Info("SIGUSR2 while starting: send it again to upgrade once started")
				continue
			}
			log.Info("stopping while starting", "signal", s.String())
			cancel()
			go func() {
				if b := <-done; b.d != nil {
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					_ = b.d.Shutdown(ctx)
				}
			}()
			return nil, errStopped
		}
	}
}
