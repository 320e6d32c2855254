// Package poolstatus is the one builder of the worker pool's status model
// (status.Pool, which the status pages render) and of the pool gauges of
// package metrics. The multiplexor's own status page builds it from its
// live pool (FromSnapshot); serve's status page, whose multiplexor runs in
// another process, from that multiplexor's "status" and "workers" replies
// (Poll). Both give the same slots: state letter, pid, the command busy
// now or else the last one, requests served, last change, tag.
package poolstatus

import (
	"sluice/internal/metrics"
	"sluice/internal/pool"
	"sluice/internal/status"
)

// FromSnapshot is the pool of sn.
func FromSnapshot(sn pool.Snapshot) *status.Pool {
	ps := &status.Pool{Queued: sn.Queued, QueueSize: sn.QueueSize, Msgs: int64(sn.Msgs), Activations: sn.Activations}
	for _, s := range sn.Slots {
		sl := status.Slot{State: string(s.State.Letter()), PID: s.PID, Tag: s.Tag, Requests: s.NumRequests, Since: s.LastChange}
		if s.Current != pool.Other {
			sl.Cmd = s.Current.Name()
		} else if s.Last != pool.Other {
			sl.Cmd = s.Last.Name()
		}
		ps.Slots = append(ps.Slots, sl)
	}
	return ps
}

// Gauges is p as the metrics' pool gauges count it.
func Gauges(p *status.Pool) metrics.PoolState {
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
