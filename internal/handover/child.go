package handover

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/sdlisten"
)

// Child is the new process's side of an upgrade: the conversation with
// the old process, and the descriptors it passed.
type Child struct {
	h *conn
	// Old names the old process in the log lines ("daemon", "multiplexor").
	Old string
	// Files are the descriptors passed, each named in Names; they are the
	// caller's to close.
	Files []*os.File
	Names []string
}

// TakeChild returns the new process's side when this process was started
// by an upgrade, or nil. The variables that announce it (FDEnv and the
// systemd variables that name the descriptors) are unset, so that nothing
// this process starts takes them for its own.
func TakeChild(old string) (*Child, error) {
	v, ok := os.LookupEnv(FDEnv)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(FDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not a descriptor", FDEnv, v)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("%s=%d: %w", FDEnv, fd, err)
	}
	unix.CloseOnExec(fd)
	h, err := newConn(os.NewFile(uintptr(fd), "upgrade"))
	if err != nil {
		return nil, err
	}
	files, names, err := sdlisten.TakeFiles(sdlisten.FromEnviron())
	if err != nil {
		h.close()
		return nil, fmt.Errorf("upgrade: the descriptors passed: %w", err)
	}
	return &Child{h: h, Old: old, Files: files, Names: names}, nil
}

// Take tells the old process that this one is ready and waits, up to
// drain beyond Wait, until it has stopped. If it is gone there is nothing
// to wait for; either way this process goes on.
func (c *Child) Take(log *slog.Logger, drain time.Duration) {
	if err := c.h.send(lineTake); err != nil {
		log.Warn("upgrade: the old "+c.Old+" is gone; going on", "err", err)
		return
	}
	log.Info("upgrade: waiting for the old " + c.Old + " to stop")
	if err := c.h.expect(lineGo, drain+Wait); err != nil {
		log.Warn("upgrade: the old "+c.Old+" did not say it stopped; going on", "err", err)
	}
}

// Serving tells the old process that this one serves, waits for its
// goodbye and ends the conversation.
func (c *Child) Serving(log *slog.Logger) {
	defer c.h.close()
	if err := c.h.send(lineServing); err == nil {
		if err := c.h.expect(lineBye, byeWait); err != nil {
			log.Warn("upgrade: the old "+c.Old+" did not say goodbye", "err", err)
		}
	}
}

// Close ends the conversation without serving (the process exits).
func (c *Child) Close() {
	c.h.close()
}
