package cli

import (
	"context"
	"strconv"

	"sluice/internal/app"
	"sluice/internal/handover"
	"sluice/internal/sdlisten"
)

// upgrade starts the executable on disk as the new daemon, with every
// listening socket of d, and hands over to it (package handover speaks
// the conversation and logs each outcome): once the new process has read
// its configuration, d stops as for SIGTERM (staged: its sessions end,
// its state is written), then the new one starts serving. It returns done
// when the new daemon serves (the caller exits); a failure before d
// stopped leaves d serving (resumed nil, done false); a failure after it
// (the new process died while starting) starts a daemon again in this
// process on the same sockets (resumed), so that the listeners are served
// whatever happens; should that fail too, lost is set and the caller
// exits 1 for the service manager to start it again.
func upgrade(d *app.Daemon, s *serveState) (done bool, resumed *app.Daemon, lost bool) {
	log := s.log
	files, names, err := d.HandOverListeners()
	if err != nil {
		log.Error("upgrade failed; still serving", "err", err)
		return false, nil, false
	}
	defer handover.CloseFiles(files)
	u := &handover.Upgrade{Log: log, Self: "daemon", New: "process", Files: files, Names: names,
		Stop: func() {
			log.Info("upgrade: stopping as for SIGTERM", "grace", s.grace)
			_ = s.sd.Stopping()
			ctx, cancel := context.WithTimeout(context.Background(), s.grace)
			_ = d.Shutdown(ctx)
			cancel()
		},
		Served: func(pid int) {
			_ = s.sd.Send("MAINPID="+strconv.Itoa(pid), "READY=1", "STATUS=serving (upgraded)")
		}}
	switch u.Run() {
	case handover.Handed:
		return true, nil, false
	case handover.Kept:
		return false, nil, false
	}
	socks, err := sdlisten.FromUpgrade(files, names)
	if err != nil {
		log.Error("cannot take the sockets back; exiting", "err", err)
		return false, nil, true
	}
	nd, err := app.New(s.cfg, s.path, log, s.level, app.WithSockets(socks), app.WithStateDir(s.stateDir))
	if err != nil {
		log.Error("cannot start again; exiting", "err", err)
		return false, nil, true
	}
	return false, nd, false
}
