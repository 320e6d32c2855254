package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"sluice/internal/config"
	"sluice/internal/metrics"
	"sluice/internal/pool"
	"sluice/internal/status"
	"sluice/internal/web"
)

// muxWebEnv names the environment variable that gives `sluice mux` a
// status page and /metrics of its own: "inet:127.0.0.1:8026" or
// "unix:/run/sluice-mux.web". It is an environment variable, not a flag,
// so that the reference's command line stays exactly as it is (Debian's
// init script passes flags from /etc/default/mimedefang; an exported
// variable there reaches the multiplexor).
const muxWebEnv = "SLUICE_MUX_WEB"

// muxWeb is the multiplexor's web server: the pool's slots on the status
// page, and its metrics (slot states, queue, activations, kills by
// reason, busy timeouts).
type muxWeb struct {
	m    *metrics.Metrics
	srv  *web.Server
	ln   net.Listener
	done chan error
	p    *pool.Pool
	ver  string
}

// newMuxWeb binds spec; serve starts it once the pool exists.
func newMuxWeb(spec string) (*muxWeb, error) {
	network, addr, err := config.ParseListen(spec)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", muxWebEnv, err)
	}
	if network == "unix" {
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(addr)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", muxWebEnv, err)
	}
	if network == "unix" {
		if err := os.Chmod(addr, 0o660); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s: %w", muxWebEnv, err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, metrics.PartPool|metrics.PartPoolEvents) // a pool, no limiter or config
	if err != nil {
		ln.Close()
		return nil, err
	}
	w := &muxWeb{m: m, ln: ln, done: make(chan error, 1), ver: versionString()}
	w.srv = web.New(web.Options{Source: web.SourceFunc(w.status), Gatherer: reg, Logger: slog.New(slog.DiscardHandler)})
	return w, nil
}

// statsEvent counts the pool's kills by reason.
func (w *muxWeb) statsEvent(ev pool.StatsEvent) {
	if ev.Event != "KillWorker" {
		return
	}
	_, reason, _ := strings.Cut(ev.Extra, `reason="`)
	reason = strings.TrimSuffix(reason, `"`)
	r := metrics.KillReasonOf(reason)
	w.m.PoolKill(r)
	if r == metrics.KillBusyTimeout {
		w.m.PoolBusyTimeout()
	}
}

func (w *muxWeb) serve(p *pool.Pool) {
	w.p = p
	go func() { w.done <- w.srv.Serve(w.ln) }()
}

func (w *muxWeb) close() {
	if w.p == nil { // never served
		w.ln.Close()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.srv.Shutdown(ctx)
		<-w.done
	}
	if ua, ok := w.ln.Addr().(*net.UnixAddr); ok {
		_ = os.Remove(ua.Name)
	}
}

// status is the pool as the status page shows it; the metrics' gauges
// are refreshed with it.
func (w *muxWeb) status() status.Status {
	st := status.Status{Version: w.ver, Now: time.Now(), Doors: []status.Door{{Name: "mux"}}}
	if w.p == nil {
		return st
	}
	sn, ok := w.p.Snapshot()
	if !ok {
		return st
	}
	st.Now, st.Started = sn.Now, sn.Start
	ps := &status.Pool{Queued: sn.Queued, QueueSize: sn.QueueSize, Msgs: int64(sn.Msgs), Activations: sn.Activations}
	state := metrics.PoolState{Queued: sn.Queued, QueueSize: sn.QueueSize, Activations: sn.Activations}
	for _, s := range sn.Slots {
		sl := status.Slot{State: string(s.State.Letter()), PID: s.PID, Tag: s.Tag, Requests: s.NumRequests, Since: s.LastChange}
		if s.Current != pool.Other {
			sl.Cmd = s.Current.Name()
		} else if s.Last != pool.Other {
			sl.Cmd = s.Last.Name()
		}
		ps.Slots = append(ps.Slots, sl)
		switch s.State {
		case pool.Stopped:
			state.Stopped++
		case pool.Idle:
			state.Idle++
		case pool.Busy:
			state.Busy++
		case pool.Killed:
			state.Killed++
		}
	}
	st.Pool = ps
	w.m.Pool(state)
	return st
}
