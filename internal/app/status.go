package app

import (
	"context"
	"time"

	"sluice/internal/metrics"
	"sluice/internal/poolstatus"
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
		Store:   &status.Store{Backend: cfg.Store.Kind, Keys: int64(d.store.Len()), Healthy: d.lim.Healthy(), Degraded: d.state.degraded()},
		Totals:  d.obs.Totals(),
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
	occ, occErr := gov.Occupancy(ctx)
	for i, c := range gov.Classes().All() {
		if occErr != nil {
			break // the store cannot count: no figure rather than a wrong one
		}
		held := occ.Held[i]
		st.Classes = append(st.Classes, status.Class{Name: c.Name, Incoming: held, Total: held, IncomingCap: c.Refuse, TotalCap: c.Queue,
			Reserve: c.Reserve, ReserveUnused: max(c.Reserve-held, 0)})
		mc = append(mc, metrics.ClassState{Name: c.Name, Incoming: held, Total: held, IncomingCap: c.Refuse, TotalCap: c.Queue, Reserve: c.Reserve})
	}
	if occErr == nil {
		capa := gov.Capacity()
		st.MTA = &status.MTA{Capacity: capa.Sessions, From: capa.From, Open: occ.Sessions, Reserved: gov.Classes().Reserved(),
			ReservedUnused: occ.Unused, Free: occ.Free(capa.Sessions)}
		ms := metrics.MTAState{Capacity: capa.Sessions, Open: occ.Sessions, ReservedUnused: occ.Unused, Free: st.MTA.Free}
		if sh := gov.ShareState(occ); sh.Budget > 0 {
			st.MTA.Share = &status.Share{Budget: sh.Budget, Networks: sh.Networks, Sessions: sh.Sessions, Largest: sh.Largest, PerNet: sh.Share, Busy: sh.Busy}
			ms.Share = &metrics.ShareState{Budget: sh.Budget, Networks: int64(sh.Networks), Sessions: sh.Sessions, Largest: sh.Largest, PerNet: sh.Share, Busy: int64(sh.Busy)}
		}
		d.metrics.MTA(ms)
	}
	d.metrics.Classes(mc)
	st.Escalation = d.escalationStatus()
	d.metrics.StateDegraded(st.Store.Degraded != "")
	st.Talkers, st.Refusals = d.obs.Top(now, statusRows)
	if d.throttleBan != nil {
		st.ThrottleKeys, _ = d.throttleBan.States(ctx)
	}
	if sock := cfg.Web.MuxSocket; sock != "" {
		if p, err := poolstatus.Poll(ctx, sock, muxPollTimeout); err == nil {
			st.Pool = p
			d.metrics.Pool(poolstatus.Gauges(p))
		} else {
			err = poolstatus.Explain(sock, err)
			st.PoolError = "cannot read the multiplexor's pool at " + sock + ": " + err.Error()
			if d.muxWarned.CompareAndSwap(false, true) {
				d.log.Warn("status page: cannot read the multiplexor's pool; will keep trying", "socket", sock, "err", err)
			}
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
	case "control":
		return d.control.Conns()
	}
	return 0
}
