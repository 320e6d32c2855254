package poolstatus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"sluice/internal/muxctl"
	"sluice/internal/sockaccess"
	"sluice/internal/status"
)

// Poll asks the multiplexor at sock for "status" and "workers" (commands
// of its unprivileged set), each bounded by timeout, and reads its pool
// from the replies.
func Poll(ctx context.Context, sock string, timeout time.Duration) (*status.Pool, error) {
	c := &muxctl.Client{Socket: sock, DialTimeout: timeout, Timeout: timeout}
	sr, err := c.Exchange(ctx, "status\n", 1<<16)
	if err != nil {
		return nil, err
	}
	p, err := parseStatus(string(sr))
	if err != nil {
		return nil, err
	}
	wr, err := c.Exchange(ctx, "workers\n", 1<<20)
	if err != nil {
		return nil, err
	}
	parseWorkers(p, wr, time.Now())
	return p, nil
}

// Explain returns err unchanged unless the multiplexor's socket at sock
// refused this process; then it says which directory or file stops it
// (sockaccess) and that the pool needs only the multiplexor's
// unprivileged socket: "status" and "workers" are allowed there, so the
// privileged one (-s, mode 0700 or 0770 with -G) is never needed.
func Explain(sock string, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return fmt.Errorf("%w; the pool needs only the multiplexor's unprivileged socket: start mimedefang-multiplexor (or sluice mux) with -a PATH in a directory every user can search, such as -a /run/mimedefang/mimedefang-multiplexor-unpriv.sock (the multiplexor makes it mode 0777; on Debian, docs/mux.md says where), and set [web] mux_socket to PATH; never give this user the privileged -s socket or the group defang",
		sockaccess.Explain(sock, err, "the multiplexor makes its -a socket mode 0777"))
}

// parseStatus reads "<letters> <msgs> <activations> <queueSize>
// <queued> <uptime>".
func parseStatus(s string) (*status.Pool, error) {
	f := strings.Fields(s)
	if len(f) < 6 || strings.Trim(f[0], "SIBK") != "" {
		return nil, &muxctl.Error{Op: "status", Err: errBadReply(s)}
	}
	n := make([]int64, 5)
	for i := range n {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return nil, &muxctl.Error{Op: "status", Err: errBadReply(s)}
		}
		n[i] = v
	}
	p := &status.Pool{Msgs: n[0], Activations: uint64(max(n[1], 0)), QueueSize: int(n[2]), Queued: int(n[3])}
	for _, l := range f[0] {
		p.Slots = append(p.Slots, status.Slot{State: string(l)})
	}
	return p, nil
}

// parseWorkers fills the slots from "workers" lines:
// "<slot> <L>[ <pid>][ <busycmd>][ last=<cmd>] ago=<secs>[ (<tag>)]".
func parseWorkers(p *status.Pool, b []byte, now time.Time) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		var tag string
		if i := strings.Index(line, " ("); i >= 0 && strings.HasSuffix(line, ")") {
			line, tag = line[:i], line[i+2:len(line)-1]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		i, err := strconv.Atoi(f[0])
		if err != nil || i < 0 || i >= len(p.Slots) {
			continue
		}
		sl := &p.Slots[i]
		sl.State, sl.Tag = f[1], tag
		for _, w := range f[2:] {
			switch {
			case strings.HasPrefix(w, "ago="):
				if secs, err := strconv.Atoi(w[4:]); err == nil {
					sl.Since = now.Add(-time.Duration(secs) * time.Second)
				}
			case strings.HasPrefix(w, "last="):
				if sl.Cmd == "" {
					sl.Cmd = w[5:]
				}
			default:
				if pid, err := strconv.Atoi(w); err == nil {
					sl.PID = pid
				} else {
					sl.Cmd = w // the busy command
				}
			}
		}
	}
}

type errBadReply string

func (e errBadReply) Error() string { return "unexpected reply " + strconv.Quote(string(e)) }
