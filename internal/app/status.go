package app

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	"sluice/internal/metrics"
	"sluice/internal/muxctl"
	"sluice/internal/status"
)

// statusRows is how many talkers the status page gets.
const statusRows = 20

// muxPollTimeout bounds each question to the multiplexor per sample.
const muxPollTimeout = 500 * time.Millisecond

// Status returns the daemon's state now, for the status page, /status.json
// and `sluice status`. It also refreshes the gauges of the metrics.
func (d *Daemon) Status() status.Status {
	now := d.lim.Now()
	cfg := d.cfg.Load()
	gov := d.gov.Load()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st := status.Status{
		Version: d.version,
		Now:     now,
		Started: d.started,
		Reload:  status.Reload{Generation: int(d.generation.Load())},
		Store:   &status.Store{Backend: cfg.Store.Kind, Keys: int64(d.store.Len()), Healthy: d.lim.Healthy()},
		Totals:  d.obs.totals(),
	}
	if t := d.reloadedAt.Load(); t != nil {
		st.Reload.At = *t
	}
	if t := d.reloadFailed.Load(); t != nil {
		st.Reload.LastFailed = *t
	}
	if cfg.Store.Kind == "memory" {
		st.Store.MaxKeys = int64(cfg.Limiter.MaxKeys)
	}
	doors := map[string]*status.Door{}
	var order []string
	for _, bl := range d.listeners {
		door := doors[bl.door]
		if door == nil {
			door = &status.Door{Name: bl.door, Conns: d.doorConns(bl.door)}
			doors[bl.door] = door
			order = append(order, bl.door)
		}
		door.Listen = append(door.Listen, bl.spec)
	}
	for _, name := range order {
		st.Doors = append(st.Doors, *doors[name])
	}
	var mc []metrics.ClassState
	for _, c := range gov.Classes().All() {
		held, err := d.lim.Held(ctx, c.LeaseKey())
		if err != nil {
			continue
		}
		st.Classes = append(st.Classes, status.Class{Name: c.Name, Incoming: held, Total: held, IncomingCap: c.Refuse, TotalCap: c.Queue})
		mc = append(mc, metrics.ClassState{Name: c.Name, Incoming: held, Total: held, IncomingCap: c.Refuse, TotalCap: c.Queue})
	}
	d.metrics.Classes(mc)
	st.Talkers, st.Deferrals = d.obs.top(now, statusRows)
	if sock := cfg.Web.MuxSocket; sock != "" {
		if p, err := pollMux(ctx, sock); err == nil {
			st.Pool = p
			d.metrics.Pool(poolState(p))
		} else if d.muxWarned.CompareAndSwap(false, true) {
			d.log.Warn("status page: cannot read the multiplexor's pool; will keep trying", "socket", sock, "err", err)
		}
	}
	return st
}

func (d *Daemon) doorConns(door string) int {
	switch door {
	case "anvil":
		return d.anvil.Conns()
	case "policy":
		return d.policy.Conns()
	case "throttle":
		return d.throttle.Conns()
	case "milter":
		return d.milter.Sessions()
	case "web":
		return d.web.Streams()
	}
	return 0
}

func poolState(p *status.Pool) metrics.PoolState {
	s := metrics.PoolState{Queued: p.Queued, QueueSize: p.QueueSize, Activations: p.Activations}
	for _, sl := range p.Slots {
		switch sl.State {
		case status.SlotStopped:
			s.Stopped++
		case status.SlotIdle:
			s.Idle++
		case status.SlotBusy:
			s.Busy++
		case status.SlotKilled:
			s.Killed++
		}
	}
	return s
}

// pollMux asks a multiplexor for "status" and "workers" (commands of its
// unprivileged set) and reads its pool from the replies.
func pollMux(ctx context.Context, sock string) (*status.Pool, error) {
	c := &muxctl.Client{Socket: sock, DialTimeout: muxPollTimeout, Timeout: muxPollTimeout}
	sr, err := c.Exchange(ctx, "status\n", 1<<16)
	if err != nil {
		return nil, err
	}
	p, err := parseMuxStatus(string(sr))
	if err != nil {
		return nil, err
	}
	wr, err := c.Exchange(ctx, "workers\n", 1<<20)
	if err != nil {
		return nil, err
	}
	parseMuxWorkers(p, wr, time.Now())
	return p, nil
}

// parseMuxStatus reads "<letters> <msgs> <activations> <queueSize>
// <queued> <uptime>".
func parseMuxStatus(s string) (*status.Pool, error) {
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

// parseMuxWorkers fills the slots from "workers" lines:
// "<slot> <L>[ <pid>][ <busycmd>][ last=<cmd>] ago=<secs>[ (<tag>)]".
func parseMuxWorkers(p *status.Pool, b []byte, now time.Time) {
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
